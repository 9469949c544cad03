-- Seeded random operations on a dictionary with ngx.shared.DICT's API, and what each returned,
-- as text: what spec/ngx/shared_differential_ngx.lua runs against ngx.shared.DICT and against
-- vmpool.shared in the same nginx worker (and from a pool state) to compare every result.
-- Loaded by the nginx handler (require "shared_ops") and compiled into pool states as a chunk.
local M = {}

local unpack = table.unpack or unpack -- luacheck: ignore 143

local function text_of(v)
  local t = type(v)
  if t == "number" then
    if v ~= v then return "nan" end
    if v == 0 and 1 / v < 0 then return "-0" end
    if v == math.floor(v) and v > -2^53 and v < 2^53 then return ("%d"):format(v) end
    return ("%.17g"):format(v)
  elseif t == "string" then
    return '"' .. v:gsub("[^%w ]", function(c) return ("\\%d"):format(c:byte()) end) .. '"'
  elseif t == "table" then -- get_keys: the order is the dictionary's own
    local items = {}
    for i = 1, #v do items[i] = text_of(v[i]) end
    table.sort(items)
    return "{" .. table.concat(items, ",") .. "}"
  end
  return tostring(v)
end

-- "n:r1,r2,...", or "error" for a raised error (the messages differ on purpose: vmpool's start
-- with "vmpool:" and say what to do)
local function results(ok, ...)
  if not ok then return "error" end
  local n = select("#", ...)
  local out = {}
  for i = 1, n do out[i] = text_of((select(i, ...))) end
  return n .. ":" .. table.concat(out, ",")
end

local KEYS = { "a", "b", "c", "d", "e", "k1", "k2", "\0bin\255", "12", 12, 1.5 }
local VALUES = { true, false, 0, 1, -1, 2^53, 1.5, -2.25, 1e308, 1 / 0, -1 / 0, "", "abc", "\0\1\255",
  ("z"):rep(300), "12", "3.5", ("L"):rep(2000) }
local ITEMS = { 0, 7, -3.5, "", "item", "\0x\0", ("q"):rep(100) }
local OPS = { "set", "set", "safe_set", "add", "safe_add", "replace", "delete", "get", "get", "get_stale",
  "incr", "incr", "lpush", "rpush", "lpop", "rpop", "llen", "ttl", "expire", "get_keys", "capacity",
  "flush_all", "flush_expired" }
local EXPTIMES = { false, 0, 100, 1000.5 } -- false: not passed
local FLAGS = { false, 0, 1, 7, 2147483647 }

-- `n` operations from `seed`, each { name, args = { n = count, ... } }; flush_all only with
-- opts.flush (rarely: it empties the dictionary)
function M.generate(seed, n, opts)
  local x = seed % 2147483646 + 1
  local function pick(list)
    x = x * 16807 % 2147483647
    return list[x % #list + 1]
  end
  local function chance(k)
    x = x * 16807 % 2147483647
    return x % k == 0
  end
  local ops = {}
  for i = 1, n do
    local name = pick(OPS)
    if name == "flush_all" and not (opts.flush and chance(8)) then name = "get" end
    -- After a flush_all, which expired entries are still there to read differs: ngx frees them
    -- from an exact LRU order, vmpool from its CLOCK approximation (README, "vmpool.shared").
    -- And ngx's ttl gives an entry it has not freed yet a negative TTL, its expire revives it,
    -- where its manual (and vmpool) say "not found". Those are not compared after a flush.
    if opts.flush and (name == "ttl" or name == "expire" or name == "get_stale") then name = "get" end
    local key = pick(KEYS)
    local args
    if name == "set" or name == "safe_set" or name == "add" or name == "safe_add" or name == "replace" then
      local value -- nil one time in ten
      if not chance(10) then value = pick(VALUES) end
      local exptime, flags = pick(EXPTIMES), pick(FLAGS)
      if flags then
        args = { n = 4, key, value, exptime or 0, flags }
      elseif exptime then
        args = { n = 3, key, value, exptime }
      else
        args = { n = 2, key, value }
      end
    elseif name == "incr" then
      local by = pick { 1, -1, 2.5, 0, "3", 1e10 }
      local form = pick { 1, 2, 3 }
      if form == 1 then
        args = { n = 2, key, by }
      elseif form == 2 then
        args = { n = 3, key, by, pick { 0, 10, -5.5 } }
      else
        args = { n = 4, key, by, pick { 0, 10 }, pick { 0, 100, 50.5 } }
      end
    elseif name == "lpush" or name == "rpush" then
      args = { n = 2, key, pick(ITEMS) }
    elseif name == "expire" then
      args = { n = 2, key, pick { 0, 100, 1000 } }
    elseif name == "get_keys" then
      args = pick { { n = 0 }, { n = 1, 0 }, { n = 1, 1000 } }
    elseif name == "flush_expired" then
      args = pick { { n = 0 }, { n = 1, 0 }, { n = 1, 1 } }
    elseif name == "capacity" or name == "flush_all" then
      args = { n = 0 }
    else
      args = { n = 1, key }
    end
    ops[i] = { name = name, args = args }
  end
  return ops
end


-- The results of `ops` on `dict`, one text per operation (ttl rounded to 0.1 s: the two clocks
-- are read at different moments)
function M.apply(dict, ops)
  local out = {}
  for i, op in ipairs(ops) do
    local r = results(pcall(dict[op.name], dict, unpack(op.args, 1, op.args.n)))
    if op.name == "ttl" then
      r = r:gsub("^1:([%d%.]+)$", function(s) return ("1:%.1f"):format(tonumber(s)) end)
    end
    out[i] = r
  end
  return out
end

function M.describe(op)
  local args = {}
  for i = 1, op.args.n do
    local v = op.args[i]
    args[i] = type(v) == "string" and #v > 20 and ("<" .. #v .. " bytes>") or text_of(v)
  end
  return op.name .. "(" .. table.concat(args, ", ") .. ")"
end

-- The first `max` operations whose results differ, described
function M.differences(ops, want, got, max)
  local out = {}
  for i = 1, #ops do
    if want[i] ~= got[i] then
      out[#out + 1] = ("#%d %s: ngx.shared %s, vmpool %s"):format(i, M.describe(ops[i]), want[i], got[i])
      if #out == max then break end
    end
  end
  return out
end

-- Scenarios that random operations do not reach, each run on an empty dictionary of 100 KiB; each
-- returns one text, the same for ngx.shared.DICT and vmpool.shared where they agree.
M.scenarios = {}

-- A full dictionary: list pushes evict nothing, they fail with "no memory" (set evicts)
function M.scenarios.full_list_push(dict)
  local n = 0
  repeat
    n = n + 1
    local ok = dict:safe_set("fill" .. n, ("v"):rep(1000))
  until not ok or n > 10000
  local answers = {}
  for i = 1, 50 do
    local len, err = dict:lpush("list" .. i % 5, ("x"):rep(4000))
    local a = len and "length" or tostring(err)
    answers[a] = (answers[a] or 0) + 1
  end
  local lost = 0
  for i = 1, n - 1 do
    if dict:get("fill" .. i) == nil then lost = lost + 1 end
  end
  local ok, err, forcible = dict:set("other", ("y"):rep(4000))
  -- (how many entries fill it differs: ngx counts slab pages, vmpool bytes)
  return ("pushes: %s; entries lost to pushes: %d; set: %s %s %s"):format(
    answers["no memory"] and ("no memory " .. answers["no memory"] .. "x") or "all stored",
    lost, tostring(ok), tostring(err), tostring(forcible))
end

-- TTLs too long to count mean no expiry; math.huge too
function M.scenarios.huge_ttl(dict)
  local out = {}
  for i, ttl in ipairs { 1e300, 2^63, 2^70, math.huge } do
    local key = "t" .. i
    local ok = dict:set(key, "v", ttl)
    out[#out + 1] = ("%s:%s ttl=%s get=%s"):format(key, tostring(ok), tostring(dict:ttl(key)), tostring(dict:get(key)))
  end
  return table.concat(out, "; ")
end

-- TTLs count whole milliseconds (resty.core passes exptime * 1000 as a C long): under 1 ms is no
-- expiry, for set, incr's init_ttl and expire; ttl answers in whole milliseconds
function M.scenarios.ttl_ms(dict)
  local out = {}
  local function whole_ms(t) return t and tonumber(("%.3f"):format(t)) == t and t end
  dict:set("ten", "v", 10)
  out[#out + 1] = "ttl 10: " .. tostring(whole_ms(dict:ttl("ten")) and dict:ttl("ten") > 9.9)
  dict:expire("ten", 10.5)
  out[#out + 1] = "ttl 10.5: " .. tostring(whole_ms(dict:ttl("ten")) and dict:ttl("ten") > 10.4)
  dict:set("tiny", "v", 0.0009)
  dict:incr("n", 1, 0, 0.0005)
  dict:set("e", "v")
  dict:expire("e", 0.0002)
  dict:set("ms", "v", 0.0019)
  ngx.sleep(0.01) -- luacheck: ignore 113 (run in nginx)
  for _, k in ipairs { "tiny", "n", "e" } do
    out[#out + 1] = ("%s: %s %s"):format(k, tostring(dict:get(k)), tostring(dict:ttl(k)))
  end
  -- (not its ttl: ngx answers a negative one for an expired entry not removed yet, README)
  out[#out + 1] = "ms: " .. tostring(dict:get("ms"))
  return table.concat(out, "; ")
end

-- Numeric keys are turned into strings as LuaJIT's tostring does
function M.scenarios.number_keys(dict)
  local out = {}
  for _, k in ipairs { 2, 2.0, 12, -7, 0.5, 1.5e3, 1e15, 2^53, 1 / 3 } do
    dict:set(k, "n")
    out[#out + 1] = tostring(k)
  end
  local keys = dict:get_keys(0)
  table.sort(keys)
  return #keys .. " keys: " .. table.concat(keys, " ") .. "; get('2')=" .. tostring(dict:get("2"))
    .. " get(2.0)=" .. tostring(dict:get(2.0)) .. " get('1500')=" .. tostring(dict:get("1500"))
end

-- Bad input: what each method returns for keys and values ngx refuses, and the words it raises
-- for a bad zone, exptime, init or init_ttl (argument errors of other kinds, whose words differ
-- on purpose, are "error")
function M.scenarios.bad_input(dict)
  local function run(f, ...)
    local function pack(...) return { n = select("#", ...), ... } end
    local r = pack(pcall(f, ...))
    if r[1] then return results(true, unpack(r, 2, r.n)) end
    local err = tostring(r[2]):gsub("^[^\n]-:%d+: ", "")
    if err:find("^vmpool:") or err:find("^bad argument") then return "error" end
    return "raised " .. err
  end
  local out = {}
  local long = ("k"):rep(65536)
  for _, name in ipairs { "get", "get_stale", "set", "safe_set", "add", "safe_add", "replace", "delete",
    "incr", "ttl", "expire", "lpush", "rpush", "lpop", "rpop", "llen" } do
    local rest = ({ incr = 1, expire = 10, lpush = "x", rpush = "x" })[name]
    if name:find("set$") or name:find("add$") or name == "replace" then rest = 1 end
    for i, k in ipairs { false, "", long, true, 7 } do
      if i == 1 then k = nil end
      local answer = rest == nil and run(dict[name], dict, k) or run(dict[name], dict, k, rest)
      out[#out + 1] = name .. "(" .. tostring(k and #tostring(k)) .. ")=" .. answer
    end
  end
  for _, v in ipairs { {}, print, true, false } do
    out[#out + 1] = "set " .. type(v) .. "=" .. run(dict.set, dict, "v", v)
    out[#out + 1] = "lpush " .. type(v) .. "=" .. run(dict.lpush, dict, "l", v)
  end
  out[#out + 1] = "rpush nil=" .. run(dict.rpush, dict, "l", nil)
  out[#out + 1] = "zone string=" .. run(dict.set, "k", 1)
  out[#out + 1] = "zone table=" .. run(dict.get, { 1 }, "k")
  out[#out + 1] = "zone nil=" .. run(dict.incr, nil, "k", 1)
  out[#out + 1] = "exptime -1=" .. run(dict.set, dict, "k", 1, -1)
  out[#out + 1] = "exptime before key=" .. run(dict.add, dict, nil, 1, -1)
  out[#out + 1] = "expire nil=" .. run(dict.expire, dict, "k")
  out[#out + 1] = "expire false=" .. run(dict.expire, dict, "k", false)
  for _, args in ipairs { { 1, "ten" }, { 1, {} }, { 1, true }, { 1, 0, -1 }, { 1, 0, "-5" }, { 1, 0, "soon" },
    { 1, 0, {} }, { 1, nil, 5 }, { 1, false, 5 }, { 1, "2", "3" } } do
    out[#out + 1] = "incr " .. tostring(args[2]):gsub(":.*", "") .. "," .. tostring(args[3]):gsub(":.*", "")
      .. "=" .. run(dict.incr, dict, "x", unpack(args, 1, 3))
  end
  dict:delete("x")
  return table.concat(out, "; ")
end

-- Filling a dictionary as nginx sizes it (issue 39: ngx counts slab pages): for each kind of
-- value, how many entries fit before the first eviction, how many safe_set stores, the free space
-- as it goes, what a value larger than the dictionary gets, and how many list items and lists fit.
-- Each line the same for ngx.shared.DICT and vmpool.shared of the same size and name length.
function M.fill(dict)
  local out = { "capacity " .. dict:capacity() }
  local function empty()
    dict:flush_all()
    dict:flush_expired()
  end
  empty()
  out[#out + 1] = "free " .. dict:free_space()
  local kinds = {
    { "n", function(i) return i end }, { "b", function() return true end },
    { "s1", function() return "x" end }, { "s100", function() return ("x"):rep(100) end },
    { "s1000", function() return ("x"):rep(1000) end }, { "s2000", function() return ("x"):rep(2000) end },
    { "s4000", function() return ("x"):rep(4000) end }, { "s9000", function() return ("x"):rep(9000) end },
  }
  for _, kind in ipairs(kinds) do
    local name, value = kind[1], kind[2]
    empty()
    local n, forced = 0, nil
    repeat
      n = n + 1
      local ok, err, forcible = dict:set("k" .. n, value(n))
      if not ok then forced = "failed " .. tostring(err) .. " " .. tostring(forcible) break end
      if forcible then forced = "evicted" end
    until forced or n > 40000
    local free = dict:free_space()
    -- how many of the first keys a further round of sets leaves
    for i = n + 1, 2 * n do dict:set("k" .. i, value(i)) end
    local left = 0
    for i = 1, 2 * n do if dict:get("k" .. i) ~= nil then left = left + 1 end end
    empty()
    local safe = 0
    repeat
      safe = safe + 1
      local ok = dict:safe_set("k" .. safe, value(safe))
    until not ok or safe > 40000
    out[#out + 1] = ("%s: %s at %d (free %d), %d left after %d more; safe_set stores %d, free %d"):format(
      name, tostring(forced), n, free, left, n, safe - 1, dict:free_space())
  end
  -- a value larger than the whole dictionary, in a full one
  empty()
  for i = 1, 50 do dict:set("k" .. i, ("x"):rep(100)) end
  local ok, err, forcible = dict:set("k1", ("x"):rep(dict:capacity() + 1))
  local left = 0
  for i = 1, 50 do if dict:get("k" .. i) ~= nil then left = left + 1 end end
  out[#out + 1] = ("huge: %s %s %s, %d of 50 left, free %d"):format(tostring(ok), tostring(err),
    tostring(forcible), left, dict:free_space())
  -- list items in one list, then one-item lists
  for _, item in ipairs { 1, "x", ("x"):rep(100), ("x"):rep(3000) } do
    empty()
    local n = 0
    repeat n = n + 1 until not dict:rpush("list", item) or n > 100000
    local lists = 0
    empty()
    repeat lists = lists + 1 until not dict:lpush("l" .. lists, item) or lists > 100000
    out[#out + 1] = ("list of %s: %d items, %d lists, free %d"):format(type(item) == "string" and #item or "number",
      n - 1, lists - 1, dict:free_space())
  end
  empty()
  return table.concat(out, "\n")
end

-- Eviction order: a full dictionary, some entries read or rewritten, then new keys that evict;
-- which of the first keys survive. The reads come in the order the keys were added, the case
-- where CLOCK's order is ngx's exact one (README, "vmpool.shared").
function M.scenarios.eviction_order(dict)
  local v = ("v"):rep(100)
  local n = 0
  repeat
    n = n + 1
    local _, _, forcible = dict:set("k" .. n, v)
  until forcible or n > 5000
  dict:get("k3")
  dict:get("k9")
  dict:get_stale("k12")
  dict:set("k5", ("w"):rep(100)) -- the same length: in place
  dict:set("k7", ("w"):rep(120)) -- another length, the same size class
  dict:set("k8", ("w"):rep(1000)) -- another size class
  dict:incr("k20", 1, 0) -- "not a number": refused, yet a use
  local evicted = 0
  for i = 1, 40 do
    local _, _, forcible = dict:set("new" .. i, v)
    if forcible then evicted = evicted + 1 end
  end
  local alive = {}
  for i = 1, 60 do
    if dict:get("k" .. i) ~= nil then alive[#alive + 1] = i end
  end
  return ("filled at %d; %d of 40 sets evicted; alive of the first 60: %s"):format(n, evicted,
    table.concat(alive, ","))
end

-- Pages freed by deletes and evictions join their free neighbours, so a value of several pages fits
-- only where as many free pages are next to each other (nginx's fragmentation)
function M.scenarios.fragmentation(dict)
  local out = {}
  local page = ("p"):rep(3000)
  local n = 0
  while dict:safe_set("p" .. n + 1, page) do n = n + 1 end
  out[#out + 1] = "pages " .. n
  dict:delete("p3")
  dict:delete("p5")
  out[#out + 1] = "two apart: " .. tostring((dict:safe_set("two", ("t"):rep(6000))))
  dict:delete("p4")
  out[#out + 1] = "three joined: " .. tostring((dict:safe_set("three", ("t"):rep(10000))))
  dict:delete("p10")
  dict:delete("p12")
  local ok, err, forcible = dict:set("big", ("b"):rep(3 * 4096))
  local alive = {}
  for i = 1, n do
    if dict:get("p" .. i) ~= nil then alive[#alive + 1] = i end
  end
  out[#out + 1] = ("set of 3 pages: %s %s %s, alive %s, free %d"):format(tostring(ok), tostring(err),
    tostring(forcible), table.concat(alive, ","), dict:free_space())
  -- small entries share pages: a page is free again only when all of its entries are gone
  dict:flush_all()
  dict:flush_expired()
  for i = 1, 64 do dict:set("s" .. i, ("s"):rep(100)) end
  local before = dict:free_space()
  for i = 1, 64, 2 do dict:delete("s" .. i) end
  local half = dict:free_space()
  for i = 2, 64, 2 do dict:delete("s" .. i) end
  out[#out + 1] = ("small: %d %d %d"):format(before, half, dict:free_space())
  return table.concat(out, "; ")
end

-- Lists as entries: a full dictionary evicts whole lists (their elements with them), and a list
-- pushed to after it expired starts again
function M.scenarios.list_eviction(dict)
  local out = {}
  local item = ("i"):rep(200)
  for l = 1, 10 do
    for _ = 1, 10 do dict:rpush("list" .. l, item) end
  end
  local free = dict:free_space()
  local n = 0
  repeat
    n = n + 1
    local _, _, forcible = dict:set("k" .. n, ("v"):rep(500))
  until forcible or n > 5000
  local lens = {}
  for l = 1, 10 do lens[l] = dict:llen("list" .. l) end
  out[#out + 1] = ("free %d, evicted at %d, lengths %s"):format(free, n, table.concat(lens, ","))
  dict:expire("list10", 100)
  out[#out + 1] = "ttl " .. tostring(dict:ttl("list10") > 99)
  for _ = 1, 3 do dict:lpop("list10") end
  out[#out + 1] = "after pops " .. dict:llen("list10") .. " " .. tostring((dict:lpop("list9")))
  return table.concat(out, "; ")
end

-- Entries that expired by time (1 ms, then a 10 ms sleep): what reads, writes of the same and of
-- another size, incr, list pushes, flush_expired and get_keys do with them. (ttl and expire are
-- left out: on an expired entry not removed yet they differ on purpose, README "vmpool.shared".)
function M.scenarios.expiry(dict)
  local sleep = ngx.sleep -- luacheck: ignore 113 (run in nginx)
  local out = {}
  local function say(...)
    local parts = {}
    for i = 1, select("#", ...) do parts[i] = text_of((select(i, ...))) end
    out[#out + 1] = table.concat(parts, " ")
  end
  local function expired_set(...)
    for i = 1, select("#", ...), 2 do dict:set(select(i, ...), select(i + 1, ...), 0.001, 3) end
  end
  expired_set("a", "aaaa", "b", "bbbb", "c", 7, "d", "dddd", "e", "eeee", "f", 1.5)
  dict:lpush("l", "x")
  dict:expire("l", 0.001)
  dict:set("live", "here")
  sleep(0.01)
  say("get", dict:get("a"))
  say("get_stale", dict:get_stale("a"))
  say("add same size", dict:add("a", "AAAA"))
  say("add other size", dict:add("b", "longer value"))
  say("get", dict:get("a"), dict:get("b"))
  say("replace", dict:replace("d", "DDDD"))
  say("incr", dict:incr("c", 1))
  say("incr init", dict:incr("c", 1, 10))
  say("incr init other size", dict:incr("e", 1, 10, 100))
  say("llen", dict:llen("l"))
  say("lpush", dict:lpush("l", "y"), dict:llen("l"), dict:lpop("l"))
  say("keys", dict:get_keys(0))
  expired_set("g", "g", "h", "h", "i", "i")
  sleep(0.01)
  say("flush_expired 1", dict:flush_expired(1))
  say("flush_expired", dict:flush_expired())
  say("get_stale", dict:get_stale("f"), dict:get_stale("g"))
  say("keys", dict:get_keys(0))
  return table.concat(out, "; ")
end

return M
