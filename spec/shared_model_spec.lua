-- vmpool.shared against a model: thousands of random operations on a dictionary and on a plain
-- Lua table that says what ngx.shared.DICT answers, with TTLs on a virtual clock (both clocks move
-- by dict:_advance, so nothing sleeps). The capacity is large enough that nothing is evicted:
-- eviction is checked in spec/shared_spec.lua. Then random arguments of every type to every
-- method: each call answers or raises a vmpool: error, and the process survives.
local vmpool = require "vmpool"

local has_integers = math.type ~= nil

-- Park-Miller, exact in doubles (see spec/values_spec.lua)
local function rng(seed)
  local state = seed
  return function(n)
    state = state * 16807 % 2147483647
    return state % n
  end
end

local function same(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) == "number" and has_integers and math.type(a) ~= math.type(b) then return false end
  return a == b
end

local function pack(...) return { n = select("#", ...), ... } end

-- "nil, 2, 'x'" for messages
local function show(t)
  local out = {}
  for i = 1, t.n do
    out[i] = type(t[i]) == "string" and string.format("%q", t[i]) or tostring(t[i])
  end
  return "(" .. table.concat(out, ", ") .. ")"
end

local function check(got, want, what)
  local ok = got.n == want.n
  for i = 1, math.max(got.n, want.n) do
    ok = ok and same(got[i], want[i])
  end
  if not ok then
    error(what .. ": got " .. show(got) .. ", the model says " .. show(want), 2)
  end
end

local Model = {}
Model.__index = Model

local function new_model()
  return setmetatable({ entries = {}, now = 1000 }, Model) -- 0 would read as "never"
end

function Model:live(k)
  local e = self.entries[k]
  if e and (e.expires == 0 or e.expires > self.now) then return e end
  return nil
end

function Model:deadline(ttl)
  ttl = tonumber(ttl) -- incr's init_ttl and expire's exptime may be numeric strings
  if not ttl or ttl == 0 then return 0 end
  return self.now + ttl
end

function Model:store(k, v, ttl, flags)
  if v == nil then
    self.entries[k] = nil
  else
    self.entries[k] = { value = v, flags = flags or 0, expires = self:deadline(ttl) }
  end
  return pack(true, nil, false)
end

local KEYS = { "a", "b", "c", "d", "e", 5 }
-- strings of the same length as others (x, y; a\0b, abc): a set of one over another is done in
-- the read cache slot without the lock (home slots, src/shared/read_cache.rs)
local STRINGS = { "", "x", "y", "a\0b", "abc", string.rep("long", 50) }

local function random_value(r)
  local kind = r(6)
  if kind == 0 then return r(2) == 0 end
  if kind == 1 then return r(100) - 50 end
  if kind == 2 then return (r(100) - 50) / 4 end
  if kind == 3 then return nil end
  return STRINGS[r(#STRINGS) + 1]
end

local function random_item(r)
  if r(2) == 0 then return r(100) end
  return STRINGS[r(#STRINGS) + 1]
end

local function random_ttl(r)
  local t = r(4)
  if t == 3 then return nil end
  return t -- 0 (never), 1 or 2 seconds
end

-- a TTL where resty.core also takes a numeric string (incr's init_ttl, expire's exptime)
local function random_ttl_or_string(r)
  local t = random_ttl(r)
  if t and r(3) == 0 then return tostring(t) end
  return t
end

-- incr's value and init: a number, or (as resty.core's tonumber takes it) a numeric string,
-- which Lua's arithmetic in the model converts just as the dictionary must (on 5.4 "3" is an
-- integer, "1.5" a float)
local function random_delta(r)
  local delta = r(2) == 0 and r(10) - 5 or (r(10) - 5) / 2
  if r(4) == 0 then return tostring(delta) end
  return delta
end

-- one random operation on both; returns a description for failure messages
local function step(r, d, m)
  local k = KEYS[r(#KEYS) + 1]
  local sk = tostring(k)
  local op = r(19)
  if op <= 1 then
    local v, ttl, flags = random_value(r), random_ttl(r), r(3) == 0 and r(10) or nil
    local name = op == 0 and "set" or "safe_set"
    check(pack(d[name](d, k, v, ttl, flags)), m:store(sk, v, ttl, flags), name)
  elseif op <= 3 then
    local v = random_value(r)
    local ttl = random_ttl(r)
    local name = op == 2 and "add" or "safe_add"
    local want
    if v == nil then
      want = pack(false, "attempt to add or replace nil values", false) -- ngx's answer, whatever the key holds
    else
      want = m:live(sk) and pack(false, "exists", false) or m:store(sk, v, ttl)
    end
    check(pack(d[name](d, k, v, ttl)), want, name)
  elseif op == 4 then
    local v = r(8) == 0 and nil or random_item(r)
    local want
    if v == nil then
      want = pack(false, "attempt to add or replace nil values", false)
    else
      want = m:live(sk) and m:store(sk, v) or pack(false, "not found", false)
    end
    check(pack(d:replace(k, v)), want, "replace")
  elseif op == 5 then
    check(pack(d:delete(k)), m:store(sk, nil), "delete")
  elseif op <= 7 then
    local e = m:live(sk)
    local want
    if not e then want = pack(nil)
    elseif e.items then want = pack(nil, "value is a list")
    elseif e.flags ~= 0 then want = pack(e.value, e.flags)
    else want = pack(e.value) end
    check(pack(d:get(k)), want, "get")
  elseif op == 8 then
    local e = m.entries[sk]
    local got = pack(d:get_stale(k))
    if e and not m:live(sk) and got.n == 1 and got[1] == nil then
      m.entries[sk] = nil -- it had expired and the dictionary has removed it since
    elseif not e then
      check(got, pack(nil), "get_stale")
    elseif e.items then
      check(got, pack(nil, "value is a list"), "get_stale")
    else
      check(got, pack(e.value, e.flags ~= 0 and e.flags or nil, not m:live(sk)), "get_stale")
    end
  elseif op <= 10 then
    local delta = random_delta(r)
    local init = r(2) == 0 and (r(3) == 0 and tostring(r(10)) or r(10)) or nil
    local init_ttl = init and random_ttl_or_string(r) or nil
    local e = m:live(sk)
    local want
    if e and (e.items or type(e.value) ~= "number") then
      want = pack(nil, "not a number")
    elseif e then
      e.value = e.value + delta
      want = init and pack(e.value, nil, false) or pack(e.value)
    elseif init then
      m.entries[sk] = { value = init + delta, flags = 0, expires = m:deadline(init_ttl) }
      want = pack(init + delta, nil, false)
    else
      want = pack(nil, "not found")
    end
    check(pack(d:incr(k, delta, init, init_ttl)), want, "incr")
  elseif op <= 12 then
    local item = random_item(r)
    local name = op == 11 and "lpush" or "rpush"
    local e = m:live(sk)
    local want
    if e and not e.items then
      want = pack(nil, "value not a list")
    else
      if not e then
        e = { items = {}, flags = 0, expires = 0 }
        m.entries[sk] = e
      end
      if name == "lpush" then table.insert(e.items, 1, item) else e.items[#e.items + 1] = item end
      want = pack(#e.items)
    end
    check(pack(d[name](d, k, item)), want, name)
  elseif op <= 14 then
    local name = op == 13 and "lpop" or "rpop"
    local e = m:live(sk)
    local want
    if not e then want = pack(nil)
    elseif not e.items then want = pack(nil, "value not a list")
    else
      want = pack(table.remove(e.items, name == "lpop" and 1 or #e.items))
      if #e.items == 0 then m.entries[sk] = nil end
    end
    check(pack(d[name](d, k)), want, name)
  elseif op == 15 then
    local e = m:live(sk)
    local want
    if not e then want = pack(0)
    elseif not e.items then want = pack(nil, "value not a list")
    else want = pack(#e.items) end
    check(pack(d:llen(k)), want, "llen")
  elseif op == 16 then
    local e = m:live(sk)
    local got = pack(d:ttl(k))
    if not e then
      check(got, pack(nil, "not found"), "ttl")
    elseif e.expires == 0 then
      check(got, pack(0), "ttl")
    else
      local left = e.expires - m.now
      assert(got.n == 1 and got[1] <= left and got[1] > left - 0.25,
        "ttl: got " .. show(got) .. ", the model says " .. left)
    end
  elseif op == 17 then
    local t = r(3)
    if r(3) == 0 then t = tostring(t) end
    local e = m:live(sk)
    if e then e.expires = m:deadline(t) end
    check(pack(d:expire(k, t)), e and pack(true) or pack(nil, "not found"), "expire")
  else
    local what = r(4)
    if what == 0 then
      -- flush_all also removes up to three entries at once, as ngx does: for the model those are
      -- like any expired entries the dictionary has removed (get_stale finds them gone, and
      -- flush_expired counts fewer)
      d:flush_all()
      for _, e in pairs(m.entries) do e.expires = m.now end
    elseif what == 1 then
      local expired = 0
      for key in pairs(m.entries) do
        if not m:live(key) then
          expired = expired + 1
          m.entries[key] = nil
        end
      end
      local freed = d:flush_expired()
      assert(freed <= expired, "flush_expired freed " .. freed .. ", the model has " .. expired .. " expired")
    elseif what == 2 then
      local want, got = {}, {}
      for key in pairs(m.entries) do if m:live(key) then want[key] = true end end
      for _, key in ipairs(d:get_keys(0)) do got[key] = true end
      for key in pairs(want) do assert(got[key], "get_keys misses " .. key) end
      for key in pairs(got) do assert(want[key], "get_keys has " .. key .. ", which the model has not") end
    else
      local dt = r(3) * 0.5
      d:_advance(dt)
      m.now = m.now + dt
    end
  end
end

describe("vmpool.shared against a model", function()
  it("answers thousands of random operations as ngx.shared.DICT does", function()
    for seed = 1, 5 do
      local d = vmpool.shared("model-" .. seed, { capacity = "4m", shards = seed })
      local empty = d:free_space()
      local m = new_model()
      local r = rng(seed * 7919)
      for i = 1, 4000 do
        local ok, err = pcall(step, r, d, m)
        if not ok then error("seed " .. seed .. ", operation " .. i .. ": " .. tostring(err), 0) end
      end
      d:flush_all()
      d:flush_expired()
      assert.are.equal(empty, d:free_space())
    end
  end)

  -- where resty.core raises, the words are its own (README, vmpool.shared)
  local NGX_WORDS = {
    '^bad "zone" argument$', '^bad "exptime" argument$', '^bad "init_ttl" argument$',
    '^must provide "init" when providing "init_ttl"$', "^bad init arg: number expected, got %a+$",
    "^bad init_ttl arg: number expected, got %a+$",
  }
  local function ngx_words(err)
    for _, pattern in ipairs(NGX_WORDS) do
      if err:find(pattern) then return true end
    end
    return false
  end

  it("answers, or raises a vmpool: error or resty.core's words, for any argument to any method", function()
    local d = vmpool.shared("model-bad", { capacity = "64k" })
    local weird = {
      nil, true, false, 0, -1, 0.5, 0 / 0, 1 / 0, -1 / 0, 2 ^ 32, 2 ^ 63, -0.0, "", "k", "12", "nan",
      string.rep("k", 65536), {}, { 1 }, print, coroutine.create(function() end), io.stdout, d,
    }
    local nweird = 23
    local methods = {
      "get", "get_stale", "set", "safe_set", "add", "safe_add", "replace", "delete", "incr", "lpush", "rpush",
      "lpop", "rpop", "llen", "ttl", "expire", "flush_all", "flush_expired", "get_keys", "capacity", "free_space",
    }
    local r = rng(4242)
    local answered, raised = 0, 0
    for _ = 1, 20000 do
      local name = methods[r(#methods) + 1]
      local args = {}
      for i = 1, 4 do args[i] = weird[r(nweird) + 1] end
      local self = r(20) == 0 and weird[r(nweird) + 1] or d
      local ok, err = pcall(d[name], self, args[1], args[2], args[3], args[4])
      if ok then
        answered = answered + 1
      else
        raised = raised + 1
        assert.is_string(err)
        assert.is_true(err:find("^vmpool: ") ~= nil or ngx_words(err), err)
      end
    end
    assert.is_true(answered > 1000 and raised > 1000)
    assert.is_true(d:set("still", "works"))
    assert.are.equal("works", d:get("still"))
  end)
end)
