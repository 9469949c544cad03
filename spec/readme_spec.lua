--- README.md's complete examples run as printed: every ```lua block that begins by requiring vmpool
-- runs in a fresh interpreter, and what it prints is what its `--> ...` comments say, in order
-- (whitespace aside). Blocks that need a module the runtime lacks (luv, cqueues) are pending.
local Sub = require "spec.support.subprocess"
local T = require "spec.support.text"
local read, squeeze = T.read, T.squeeze


-- { line = first line's number, source = text } for every ```lua block
local function lua_blocks(text)
  local blocks, current, n = {}, nil, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if current then
      if line:match("^```") then
        blocks[#blocks + 1] = current
        current = nil
      else
        current.source = current.source .. line .. "\n"
      end
    elseif line == "```lua" then
      current = { line = n + 1, source = "" }
    end
  end
  return blocks
end

local function has(module)
  return (pcall(require, module))
end

local complete = {}
for _, b in ipairs(lua_blocks(read("README.md"))) do
  local src = b.source
  if src:match("^local vmpool = require \"vmpool\"") or src:match("^local %w+ = require \"%w+\"\nlocal vmpool") then
    complete[#complete + 1] = b
  end
end

describe("README.md's examples", function()
  it("include the synopsis and both event-loop adapters' examples", function()
    -- so that a change of the README's layout cannot silently leave the checks below with nothing
    assert.is_true(#complete >= 3, "found " .. #complete .. " complete examples")
  end)

  for _, b in ipairs(complete) do
    local needs = b.source:match("require \"(luv)\"") or b.source:match("require \"(cqueues)\"")
    local name = ("the example at README.md:%d runs and prints what its comments say"):format(b.line)
    if needs and not has(needs) then
      pending(name .. " (no " .. needs .. " for this runtime)")
    else
      it(name, function()
        local expected = {}
        for said in b.source:gmatch("%-%->([^\n]*)") do expected[#expected + 1] = squeeze(said) end
        local out, status, killed = Sub.run(b.source, { timeout = 60 })
        assert.is_false(killed, out)
        assert.are.equal(0, status, out)
        local printed = {}
        for line in out:gmatch("([^\n]*)\n") do printed[#printed + 1] = squeeze(line) end
        assert.are.same(expected, printed)
      end)
    end
  end
end)
