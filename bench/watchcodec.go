package bench

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// placementsField is WatchAssignmentResponse.tasks.
const placementsField = 3

// skimCodec is the bench watchers' binary codec. Its Unmarshal of a
// WatchAssignmentResponse leaves out the placements, which the bench does
// not look at: a thousand watchers decoding every placement of every
// generation would spend the machine's CPU, which the cluster under test
// shares, on the bench itself. Every other message decodes in full.
type skimCodec struct{}

func (skimCodec) Name() string { return "proto" }

func (skimCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.Marshal(pm)
}

func (skimCodec) Unmarshal(b []byte, m any) error {
	if w, ok := m.(*xcev1.WatchAssignmentResponse); ok {
		rest, err := withoutField(b, placementsField)
		if err != nil {
			return err
		}
		return proto.Unmarshal(rest, w)
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.Unmarshal(b, pm)
}

// withoutField returns the encoded message b without field num.
func withoutField(b []byte, num protowire.Number) ([]byte, error) {
	out := make([]byte, 0, 64)
	for len(b) > 0 {
		n, typ, tagLen := protowire.ConsumeTag(b)
		if tagLen < 0 {
			return nil, protowire.ParseError(tagLen)
		}
		valLen := protowire.ConsumeFieldValue(n, typ, b[tagLen:])
		if valLen < 0 {
			return nil, protowire.ParseError(valLen)
		}
		if n != num {
			out = append(out, b[:tagLen+valLen]...)
		}
		b = b[tagLen+valLen:]
	}
	return out, nil
}
