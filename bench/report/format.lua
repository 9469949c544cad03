-- Number formatting for the report, and the two comparisons its prose is built on (`cmp`,
-- `clearly_below`): one place decides what "faster" and "clear" mean for every section.
local B = require "benchlib"

local M = {}

local function num(v, digits)
  if type(v) ~= "number" then return "–" end
  digits = digits or 2
  if math.abs(v) < 0.5 * 10 ^ -digits then v = 0 end -- no "-0"
  local s = string.format("%." .. digits .. "f", v)
  -- thousands separators for the integer part
  local int, frac = s:match("^(-?%d+)(.*)$")
  int = int:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^(-?),", "%1")
  return int .. frac
end

--- significant-figure formatting for times
local function t(v)
  if type(v) ~= "number" then return "–" end
  if v >= 100 then return num(v, 0) end
  if v >= 10 then return num(v, 1) end
  if v >= 1 then return num(v, 2) end
  return string.format("%.3f", v)
end

local function mmm(s, f)
  f = f or t
  if not s then return "–" end
  return string.format("%s [%s–%s]", f(s.median), f(s.min), f(s.max))
end

local function ratio(a, b)
  if type(a) ~= "number" or type(b) ~= "number" or b == 0 then return nil end
  return a / b
end

local function x(r)
  if not r then return "–" end
  if r >= 10 then return string.format("%.0f×", r) end
  if r < 0.1 then return string.format("%.2g×", r) end
  return string.format("%.1f×", r)
end

local function pct(r) return string.format("%.0f%%", r * 100) end

local function mb(kb) return type(kb) == "number" and kb / 1024 or nil end

--- "5% faster" / "1.8× slower" for the time summary a relative to b, flagged when the min–max
--- ranges of the runs overlap (then the difference is not shown by these runs)
local function cmp(a, b)
  if not a or not b then return "–" end
  local r = a.median / b.median
  local word
  if r <= 1 then
    word = (1 / r >= 1.1) and (x(1 / r) .. " faster") or (pct(1 - r) .. " faster")
  else
    word = (r >= 1.1) and (x(r) .. " slower") or (pct(r - 1) .. " slower")
  end
  if a.min <= b.max and b.min <= a.max then word = word .. " (within the run-to-run spread)" end
  return word
end

--- true when summary a is clearly below b: medians 5% apart and the ranges of the runs disjoint
local function clearly_below(a, b)
  return a and b and a.median < 0.95 * b.median and a.max < b.min
end

--- ratios with two decimals (goals such as 1.05× and 0.95× need them)
local function x2(r) return type(r) == "number" and string.format("%.2f×", r) or "–" end

--- summary of the per-round ratios a[i] / b[i] (rounds paired by index); nil without both
local function paired(a, b)
  if not a or not b then return nil end
  local xs = {}
  for i = 1, math.min(#a, #b) do
    if type(a[i]) == "number" and type(b[i]) == "number" and b[i] > 0 then xs[#xs + 1] = a[i] / b[i] end
  end
  return B.summary(xs)
end

--- "**met**", or "**not met**" with how far the median is from the goal; "–" when not measured.
--- `at_least`: the goal is a lower bound.
local function verdict(s, goal, at_least)
  if not s then return "–" end
  local m = s.median
  if (at_least and m >= goal) or (not at_least and m <= goal) then return "**met**" end
  if at_least then return string.format("**not met** (%.0f%% short)", (1 - m / goal) * 100) end
  if m >= 2 * goal then return string.format("**not met** (%.1f× the limit)", m / goal) end
  return string.format("**not met** (%.0f%% over)", (m / goal - 1) * 100)
end

M.num, M.t, M.mmm, M.ratio, M.x, M.pct, M.mb = num, t, mmm, ratio, x, pct, mb
M.cmp, M.clearly_below, M.x2, M.paired, M.verdict = cmp, clearly_below, x2, paired, verdict

return M
