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
#: state, related pages, row and sibling-group sections. Version 2 (written where every
#: length fits, 8 bytes: stats, row and group under 256 bytes, state and related pages under
#: 65,536) or 1 (16 bytes, any lengths; read, and written where one does not fit).
RECORD_VERSION = 2
RECORD_HEADS = {1: struct.Struct("<BBIIHI"), 2: struct.Struct("<BBHHBB")}
RECORD_HEAD = RECORD_HEADS[RECORD_VERSION]
#: the longest head (what the stats read takes before the stats)
RECORD_HEAD_MOST = max(h.size for h in RECORD_HEADS.values())


def record_layout(record: bytes) -> tuple[int, tuple[int, ...]]:
    """A page record's head size and its five sections' lengths (stats, state, related
    pages, row, group), either version; raises ValueError where ``record`` is not one (its
    head's lengths need not add up to its size: a stats read takes only the record's start).

    >>> record_layout(bytes([2, 1, 2, 0, 0, 0, 0, 0]) + b"sss")
    (8, (1, 2, 0, 0, 0))
    """
    head = RECORD_HEADS.get(record[0]) if record else None
    if head is None or len(record) < head.size:
        raise ValueError("not a lookaround page record")
    return head.size, head.unpack_from(record, 0)[1:]


#: Sections of a page record, in order (1-based in the scripts).
STATS, STATE, NEIGHBOURS, ROW, GROUP = 1, 2, 3, 4, 5

#: Lua helpers every script shares: a page record's sections, and writing one back. A record
#: expires ``ttl`` ms after its page's last write, unless it holds a sibling group that must
#: stay: one of several pages, or of a page not fetched (a group's home record, below).
LUA_LIB = """
local HEAD = 16  -- the longest head (version 1)
local ttl = 0
local function layout(v)
  -- a page record's head size and its sections' lengths (version 2 or 1); nil if not one
  if not v then return nil end
  local version, head, lens = string.byte(v, 1), nil, nil
  if version == 2 and #v >= 8 then
    head, lens = 8, {struct.unpack('<BHHBB', v, 2)}
  elseif version == 1 and #v >= 16 then
    head, lens = 16, {struct.unpack('<BIIHI', v, 2)}
  else
    return nil
  end
  local total = head
  for j = 1, 5 do total = total + lens[j] end
  if total ~= #v then return nil end
  return head, lens
end
local function sections(v)
  local head, lens = layout(v)
  if not head then return nil end
  local at = head + 1
  local out = {}
  for j = 1, 5 do
    out[j] = string.sub(v, at, at + lens[j] - 1)
    at = at + lens[j]
  end
  return out
end
local function fetched_at(s)
  -- a history state's last fetch time: float64 from byte 3, or uint32 (version 3, flag 8)
  if #s >= 6 and string.byte(s, 1) == 3 and math.floor(string.byte(s, 2) / 8) % 2 == 1 then
    return (struct.unpack('<I', s, 3))
  end
  if #s >= 10 then return (struct.unpack('<d', s, 3)) end
  return nil
end
local function save(key, parts, keep_ttl)
  local n1, n2, n3, n4, n5 = #parts[1], #parts[2], #parts[3], #parts[4], #parts[5]
  local v
  if n1 < 256 and n2 < 65536 and n3 < 65536 and n4 < 256 and n5 < 256 then
    v = struct.pack('<BBHHBB', 2, n1, n2, n3, n4, n5)
  else
    v = struct.pack('<BBIIHI', 1, n1, n2, n3, n4, n5)
  end
  v = v .. table.concat(parts)
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
  local t_new, t_old = fetched_at(new[2]), fetched_at(old[2])
  if t_new and t_old and t_new <= t_old then ok = false end
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
  local head, lens = layout(v)
  if not head then return 0 end
  local at = head + 1
  for j = 1, wanted - 1 do at = at + lens[j] end
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
