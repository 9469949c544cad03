-- Horizontal grouped bar charts as standalone SVG, with min-max whiskers and a linear or log scale:
-- enough for the report's charts without any plotting package.
--
-- svg.bars {
--   title = "...", unit = "us per call", log = true,
--   series = { "P = 1000", "P = 4000" },            -- one bar per series in each group
--   groups = { { label = "no pool", values = { { v = 12, lo = 11, hi = 14 }, ... } }, ... },
--   marks = { { v = 3, label = "target" } },        -- optional vertical reference lines
-- } -> SVG text
local M = {}

local PALETTE = { "#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb" }

local function esc(s)
  return (tostring(s):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"):gsub('"', "&quot;"))
end

local function fmt(v)
  if v >= 100 then return string.format("%.0f", v) end
  if v >= 10 then return string.format("%.1f", v) end
  if v >= 1 then return string.format("%.2f", v) end
  return string.format("%.3g", v)
end
M.fmt = fmt

local function nice_step(range, target)
  local raw = range / target
  local mag = 10 ^ math.floor(math.log(raw, 10))
  for _, m in ipairs { 1, 2, 2.5, 5, 10 } do
    if raw <= m * mag then return m * mag end
  end
  return 10 * mag
end

function M.bars(c)
  local series = c.series or { "" }
  local ns = #series
  local bar_h, bar_gap, group_gap = 13, 2, 12
  local left, right, top = c.label_width or 240, 90, 46
  local width = c.width or 900
  local plot_w = width - left - right
  local group_h = ns * (bar_h + bar_gap) - bar_gap
  local legend_h = ns > 1 and 22 or 0
  local height = top + #c.groups * (group_h + group_gap) + 34 + legend_h

  local lo_v, hi_v = math.huge, 0
  local function see(v)
    if type(v) == "number" and v > 0 then
      if v < lo_v then lo_v = v end
      if v > hi_v then hi_v = v end
    end
  end
  for _, g in ipairs(c.groups) do
    for _, val in pairs(g.values) do
      see(val.v)
      see(val.lo)
      see(val.hi)
    end
  end
  for _, m in ipairs(c.marks or {}) do see(m.v) end
  if hi_v == 0 then lo_v, hi_v = 1, 10 end

  local x_of, ticks
  if c.log then
    local a = math.floor(math.log(lo_v, 10))
    local b = math.ceil(math.log(hi_v, 10))
    if b == a then b = a + 1 end
    x_of = function(v)
      if not v or v <= 0 then return left end
      return left + (math.log(v, 10) - a) / (b - a) * plot_w
    end
    ticks = {}
    for e = a, b do
      ticks[#ticks + 1] = 10 ^ e
      if b - a <= 3 and e < b then
        ticks[#ticks + 1] = 2 * 10 ^ e
        ticks[#ticks + 1] = 5 * 10 ^ e
      end
    end
  else
    local step = nice_step(hi_v, 6)
    local max = math.ceil(hi_v / step) * step
    x_of = function(v) return left + (v or 0) / max * plot_w end
    ticks = {}
    for t = 0, max + step / 2, step do ticks[#ticks + 1] = t end
  end

  local o = {}
  local function add(s) o[#o + 1] = s end
  add(string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" ' ..
    'font-family="DejaVu Sans, Arial, sans-serif" font-size="11">', width, height, width, height))
  add(string.format('<rect width="%d" height="%d" fill="white"/>', width, height))
  add(string.format('<text x="%d" y="18" font-size="14" font-weight="bold">%s</text>', 10, esc(c.title or "")))
  if c.subtitle then
    add(string.format('<text x="%d" y="34" fill="#555">%s</text>', 10, esc(c.subtitle)))
  end
  local plot_bottom = top + #c.groups * (group_h + group_gap)
  for _, t in ipairs(ticks) do
    local x = x_of(t)
    add(string.format('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>', x, top - 4, x, plot_bottom))
    add(string.format('<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s</text>', x, plot_bottom + 14,
      string.format("%g", t)))
  end
  add(string.format('<text x="%d" y="%d" text-anchor="middle" fill="#444">%s%s</text>', left + math.floor(plot_w / 2),
    plot_bottom + 28, esc(c.unit or ""), c.log and " (log scale)" or ""))

  for gi, g in ipairs(c.groups) do
    local y0 = top + (gi - 1) * (group_h + group_gap)
    add(string.format('<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>', left - 8,
      y0 + group_h / 2, esc(g.label)))
    for si = 1, ns do
      local val = g.values[si]
      local y = y0 + (si - 1) * (bar_h + bar_gap)
      if val and type(val.v) == "number" then
        local x1 = x_of(val.v)
        add(string.format('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>', left, y,
          math.max(1, x1 - left), bar_h, PALETTE[(si - 1) % #PALETTE + 1]))
        if val.lo and val.hi then
          local xl, xh = x_of(val.lo), x_of(val.hi)
          local ym = y + bar_h / 2
          add(string.format('<path d="M%.1f %.1fH%.1fM%.1f %.1fV%.1fM%.1f %.1fV%.1f" stroke="#222" fill="none"/>',
            xl, ym, xh, xl, ym - 4, ym + 4, xh, ym - 4, ym + 4))
        end
        add(string.format('<text x="%.1f" y="%.1f" dominant-baseline="middle" fill="#222">%s</text>',
          math.max(x1, val.hi and x_of(val.hi) or 0) + 4, y + bar_h / 2, esc(val.text or fmt(val.v))))
      elseif val and val.text then
        add(string.format('<text x="%d" y="%.1f" dominant-baseline="middle" fill="#888">%s</text>', left + 4,
          y + bar_h / 2, esc(val.text)))
      end
    end
  end
  for _, m in ipairs(c.marks or {}) do
    local x = x_of(m.v)
    add(string.format('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#c00" stroke-dasharray="4 3"/>', x, top - 8,
      x, plot_bottom))
    add(string.format('<text x="%.1f" y="%d" fill="#c00" text-anchor="middle">%s</text>', x, top - 10, esc(m.label)))
  end
  if ns > 1 then
    local x = left
    local y = height - 12
    for si, s in ipairs(series) do
      add(string.format('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>', x, y - 10,
        PALETTE[(si - 1) % #PALETTE + 1]))
      add(string.format('<text x="%d" y="%d">%s</text>', x + 16, y, esc(s)))
      x = x + 28 + #s * 7
    end
  end
  add("</svg>")
  return table.concat(o, "\n") .. "\n"
end

return M
