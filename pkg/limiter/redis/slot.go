package redis

// Redis Cluster key slots (https://redis.io/docs/reference/cluster-spec/):
// HASH_SLOT = CRC16(key) mod 16384, where CRC16 is CRC-16/XMODEM
// (polynomial 0x1021, initial value 0, no reflection), computed over the
// hash tag when the key has one: the bytes between the first '{' and the
// first '}' after it, if that is not empty.

// slotCount is the number of Redis Cluster hash slots.
const slotCount = 16384

// keySlot returns the Redis Cluster slot of key (CLUSTER KEYSLOT).
func keySlot(key string) uint16 {
	if s := indexByte(key, '{'); s >= 0 {
		if e := indexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return crc16(key) % slotCount
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// crc16 is CRC-16/XMODEM, bit by bit: keys are short hash tags, and a table
// would be package state for no measurable gain.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
