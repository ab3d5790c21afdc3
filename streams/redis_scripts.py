"""The Redis page record's layout and the Lua scripts that write and read it atomically
(`streams.redis_store.RedisPageStore` runs them, one script per hash slot on a cluster).

A record is a version byte, the five sections' lengths and the sections (stats, history
state, related pages, look-around row, sibling group); the scripts write a batch's sections
into each page's record in place, keep a record alive while it holds a sibling group that
must stay, and read one section of many records in one call.
"""

from __future__ import annotations

import struct

#: The page record's layout version and its header after it: the lengths of the stats,
#: state, related pages, row and sibling-group sections.
RECORD_VERSION = 1
RECORD_HEAD = struct.Struct("<BBIIHI")
#: Sections of a page record, in order (1-based in the scripts).
STATS, STATE, NEIGHBOURS, ROW, GROUP = 1, 2, 3, 4, 5

#: Lua helpers every script shares: a page record's sections, and writing one back. A record
#: expires ``ttl`` ms after its page's last write, unless it holds a sibling group that must
#: stay: one of several pages, or of a page not fetched (a group's home record, below).
LUA_LIB = """
local HEAD = 16
local ttl = 0
local function sections(v)
  if (not v) or #v < HEAD or string.byte(v, 1) ~= 1 then return nil end
  local l1, l2, l3, l4, l5 = struct.unpack('<BIIHI', v, 2)
  if HEAD + l1 + l2 + l3 + l4 + l5 ~= #v then return nil end
  local at = HEAD + 1
  local out = {}
  for _, len in ipairs({l1, l2, l3, l4, l5}) do
    out[#out + 1] = string.sub(v, at, at + len - 1)
    at = at + len
  end
  return out
end
local function save(key, parts, keep_ttl)
  local v = struct.pack('<BBIIHI', 1, #parts[1], #parts[2], #parts[3], #parts[4], #parts[5])
    .. table.concat(parts)
  local _, members = string.gsub(parts[5], '\\n', '')
  if ttl == 0 or members >= 2 or (parts[2] == '' and members > 0) then
    redis.call('SET', key, v)
  elseif keep_ttl then
    redis.call('SET', key, v, 'KEEPTTL')
  else
    redis.call('SET', key, v, 'PX', ttl)
  end
end
"""

#: KEYS: W worker keys (learner, allocation, follow; W is 0 or 3), G sibling groups' home
#: records, H group-gain keys, then P page keys.
#: ARGV: ttl ms (0: none), W, G, H, the W worker blobs ("": unchanged), the G groups' new
#: members (each ended by a newline), the H gains, then 4 per page (stats, state, related
#: pages, row; "" where the batch has none). Returns {pages written, pages skipped}.
WRITE_LUA = (
    LUA_LIB
    + """
ttl = tonumber(ARGV[1])
local nw, ng, nh = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local a = 4
for g = 1, ng do
  local key = KEYS[nw + g]
  local parts = sections(redis.call('GET', key)) or {'', '', '', '', ''}
  local have = '\\n' .. parts[5]
  local add = {}
  for member in string.gmatch(ARGV[a + nw + g], '[^\\n]+') do
    local line = member .. '\\n'
    if not string.find(have, '\\n' .. line, 1, true) then
      add[#add + 1] = line
      have = have .. line
    end
  end
  if #add > 0 then
    parts[5] = parts[5] .. table.concat(add)
    save(key, parts, true)
  end
end
for h = 1, nh do
  local key = KEYS[nw + ng + h]
  local gain = ARGV[a + nw + ng + h]
  local old = redis.call('GET', key)
  if (not old) or #old < 8 or struct.unpack('<d', gain, 1) > struct.unpack('<d', old, 1) then
    redis.call('SET', key, gain)
  end
end
local written, skipped = 0, 0
local k0, a0 = nw + ng + nh, a + nw + ng + nh
for i = 0, (#KEYS - k0) - 1 do
  local key = KEYS[k0 + 1 + i]
  local new = {ARGV[a0 + 1 + 4 * i], ARGV[a0 + 2 + 4 * i], ARGV[a0 + 3 + 4 * i],
               ARGV[a0 + 4 + 4 * i], ''}
  local old = sections(redis.call('GET', key)) or {'', '', '', '', ''}
  local ok = true
  if #new[2] >= 10 and #old[2] >= 10 then
    if struct.unpack('<d', new[2], 3) <= struct.unpack('<d', old[2], 3) then ok = false end
  end
  if ok then
    for j = 1, 5 do
      if new[j] == '' then new[j] = old[j] end
    end
    save(key, new, false)
    written = written + 1
  else
    skipped = skipped + 1
  end
end
for w = 1, nw do
  if ARGV[a + w] ~= '' then redis.call('SET', KEYS[w], ARGV[a + w]) end
end
return {written, skipped}
"""
)

#: KEYS: page keys; ARGV[1]: the section to read (1-5; 0: the whole value, any key; -1 to -5:
#: whether the section is there, as 1). Returns per key the section (false: no record or an
#: empty section; 0: not a page record); the stats (1) with the record's head before them
#: (ARGV[2]: their most bytes), which `RedisPageStore.get_stats` checks and cuts off.
READ_LUA = (
    LUA_LIB
    + """
local which = tonumber(ARGV[1])
local most = tonumber(ARGV[2] or '0')
local function stats_of(key)
  -- the stats come first: read no more of the record than its head and them (at most
  -- ``most`` bytes), the head cut off by the caller
  local v = redis.call('GETRANGE', key, 0, HEAD + most - 1)
  if v == '' then return false end
  return v
end
local wanted = math.abs(which)
local function section_of(key)
  local v = redis.call('GET', key)
  if not v then return false end
  if which == 0 then return v end
  if #v < HEAD or string.byte(v, 1) ~= 1 then return 0 end
  local lens = {struct.unpack('<BIIHI', v, 2)}
  local at, total = HEAD + 1, HEAD
  for j = 1, 5 do
    if j < wanted then at = at + lens[j] end
    total = total + lens[j]
  end
  if total ~= #v then return 0 end
  local len = lens[wanted]
  if len == 0 then return false end
  if which < 0 then return 1 end
  return string.sub(v, at, at + len - 1)
end
local out = {}
for i, key in ipairs(KEYS) do
  if which == 1 then out[i] = stats_of(key) else out[i] = section_of(key) end
end
return out
"""
)
