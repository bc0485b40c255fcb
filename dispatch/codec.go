package dispatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/xce/xce/netio"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// strictJSON is the API's JSON codec: protojson, like the RPC library's
// own, except that a field the message does not have is refused instead of
// dropped, so that a misspelt field is not taken for an absent one. The
// library answers a codec's error with invalid_argument; the message names
// the field.
type strictJSON struct{ name string }

// jsonCodecs replace the library's JSON codecs under both of their names.
func jsonCodecs() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(strictJSON{"json"}),
		connect.WithCodec(strictJSON{"json; charset=utf-8"}),
	}
}

func (c strictJSON) Name() string { return c.name }

func (strictJSON) IsBinary() bool { return false }

func asProto(m any) (proto.Message, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return pm, nil
}

func (strictJSON) Marshal(m any) ([]byte, error) {
	pm, err := asProto(m)
	if err != nil {
		return nil, err
	}
	return protojson.Marshal(pm)
}

func (strictJSON) MarshalAppend(dst []byte, m any) ([]byte, error) {
	pm, err := asProto(m)
	if err != nil {
		return nil, err
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, pm)
}

// MarshalStable is Marshal without protojson's varying whitespace.
func (c strictJSON) MarshalStable(m any) ([]byte, error) {
	b, err := c.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func (strictJSON) Unmarshal(b []byte, m any) error {
	pm, err := asProto(m)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	if err := protojson.Unmarshal(b, pm); err != nil {
		return fmt.Errorf("%s: %w", pm.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// StreamingProcedures are the API's procedures that stream (WatchStatus):
// they may stay open as long as their client reads, so the server bounds
// each of their writes rather than the whole call (netio.LongStream).
func StreamingProcedures() []string {
	var out []string
	svcs := xcev1.File_xce_v1_xce_proto.Services()
	for i := range svcs.Len() {
		svc := svcs.Get(i)
		ms := svc.Methods()
		for j := range ms.Len() {
			if m := ms.Get(j); m.IsStreamingServer() || m.IsStreamingClient() {
				out = append(out, procedure(svc, m))
			}
		}
	}
	return out
}

func procedure(svc protoreflect.ServiceDescriptor, m protoreflect.MethodDescriptor) string {
	return "/" + string(svc.FullName()) + "/" + string(m.Name())
}

// mountStreams routes each streaming procedure under one of the mounted
// service paths through netio.LongStream.
func mountStreams(mux *http.ServeMux, services map[string]http.Handler) {
	for _, p := range StreamingProcedures() {
		for path, h := range services {
			if strings.HasPrefix(p, path) {
				mux.Handle(p, netio.LongStream(h))
			}
		}
	}
}
