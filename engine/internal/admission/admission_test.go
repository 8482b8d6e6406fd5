package admission

import (
	"testing"
	"unsafe"
)

// TestRecordSize: a Record, with its room for the usual request, stays in
// the allocator's 480-byte size class, so an admission costs no more.
func TestRecordSize(t *testing.T) {
	if n := unsafe.Sizeof(Record{}); n > 480 {
		t.Errorf("Record is %d bytes, want at most 480 (one size class)", n)
	}
}
