package backup_test

import (
	"bytes"
	"testing"

	"github.com/xce/xce/backup"
)

// FuzzVerify feeds arbitrary bytes to the file reader: it never panics,
// and a file it accepts is exactly the one its header and data encode.
func FuzzVerify(f *testing.F) {
	good, _ := backup.Marshal("c1", 12, 3, []byte("XCESNAP\n\x00\x00\x00\x03{}\n"))
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte(backup.Magic))
	empty, _ := backup.Marshal("", 0, 0, nil)
	f.Add(empty)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := backup.Verify(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		again, err := backup.Marshal(h.ClusterID, h.Index, h.Term, b[h.Len():])
		if err != nil {
			t.Fatalf("accepted header does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("accepted %x, which encodes as %x", b, again)
		}
	})
}
