package engine

import "strings"

// crc16Table is the CRC16-XMODEM (CCITT, polynomial 0x1021, initial value
// 0) table Redis Cluster uses to map keys to slots.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crc16Table[byte(c>>8)^s[i]]
	}
	return c
}

// slot returns the Redis Cluster hash slot of key: CRC16 of the hash tag
// (the content of the first {...} when it is not empty) or of the whole
// key, modulo 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) & 16383
}
