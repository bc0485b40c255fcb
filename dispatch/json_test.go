package dispatch_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/client/transport"
	"github.com/xce/xce/dispatch"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/netio"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// A JSON request with a field its message does not have is refused with
// invalid_argument naming the field, at any depth, and changes nothing; the
// JSON and the proto names of real fields are both taken.
func TestUnknownJSONFieldRefused(t *testing.T) {
	ts, before := seededPrimary(t, netio.DefaultLimits())
	for _, tc := range []struct {
		procedure, body, field string
	}{
		{xcev1connect.ControllerServiceSubmitTaskProcedure, `{"tsakId":"t1"}`, "tsakId"},
		{xcev1connect.ControllerServiceSubmitTaskProcedure, `{"taskId":"t1","standbyReplica":1}`, "standbyReplica"},
		{xcev1connect.ControllerServiceSubmitTaskProcedure, `{"taskId":"t1","requestId":"r","clientID":"c"}`, "clientID"},
		{xcev1connect.ControllerServiceDeleteTaskProcedure, `{"taskId":"seeded","force":true}`, "force"},
		{xcev1connect.ControllerServiceGetTaskProcedure, `{"taskId":"seeded","consistancy":"CONSISTENCY_STALE"}`, "consistancy"},
		{xcev1connect.ControllerServiceStatusProcedure, `{"verbose":true}`, "verbose"},
		{xcev1connect.WorkerServiceHeartbeatProcedure, `{"workerId":"w1","facts":[{"kind":"FACT_KIND_NOTIFY","txt":"hi"}]}`, "txt"},
	} {
		status, code, msg := postJSON(t, ts.addr, tc.procedure, []byte(tc.body))
		t.Logf("%s %s: HTTP %d %s %q", tc.procedure, tc.body, status, code, msg)
		if status != http.StatusBadRequest || code != "invalid_argument" || !strings.Contains(msg, `unknown field "`+tc.field+`"`) {
			t.Errorf("%s %s: HTTP %d code %q message %q, want 400 invalid_argument naming %q", tc.procedure, tc.body, status, code, msg, tc.field)
		}
	}
	checkUnchanged(t, ts.node, before)

	for _, body := range []string{`{"taskId":"json-name"}`, `{"task_id":"proto-name","standby_replicas":1}`} {
		req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, "http://"+ts.addr+xcev1connect.ControllerServiceSubmitTaskProcedure, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"task"`) {
			t.Errorf("%s: HTTP %d %s", body, resp.StatusCode, raw)
		}
	}
}

// A streaming call's JSON message is held to the same rule.
func TestUnknownJSONFieldRefusedOnAStream(t *testing.T) {
	ts, _ := seededPrimary(t, netio.DefaultLimits())
	msg := []byte(`{"since":5}`)
	env := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(env[1:], uint32(len(msg)))
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, "http://"+ts.addr+xcev1connect.ControllerServiceWatchStatusProcedure, bytes.NewReader(env))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			t.Fatalf("stream ended without its end message: %v", err)
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatal(err)
		}
		if hdr[0]&0x02 == 0 {
			t.Fatalf("the stream sent a message: %s", body)
		}
		var end struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(body, &end); err != nil {
			t.Fatalf("end message %s: %v", body, err)
		}
		if end.Error.Code != "invalid_argument" || !strings.Contains(end.Error.Message, `unknown field "since"`) {
			t.Errorf("end of stream %s, want invalid_argument naming the field", body)
		}
		return
	}
}

// A Connect client speaking JSON (what a hand-written client sends) gets
// through the strict codec both ways, on unary and streaming calls.
func TestJSONClientRoundTrip(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.DefaultLimits())
	tr := transport.New()
	defer tr.CloseIdleConnections()
	cl := xcev1connect.NewControllerServiceClient(&http.Client{Transport: tr}, "http://"+ts.addr, connect.WithProtoJSON())
	ctx := ctxT(t)
	r, err := cl.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "j1", Stateful: true, StandbyReplicas: 1, ClientId: "c", RequestId: "r1"}))
	if err != nil || r.Msg.Task.GetTaskId() != "j1" || !r.Msg.Task.GetStateful() {
		t.Fatalf("submit over JSON: %v %v", r, err)
	}
	stream, err := cl.WatchStatus(ctx, connect.NewRequest(&xcev1.WatchStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().Role != xcev1.Role_ROLE_PRIMARY || stream.Msg().Tasks != 1 {
		t.Fatalf("watch over JSON: %v %v", stream.Msg(), stream.Err())
	}
}

// The proto's streams are WatchStatus, WatchAssignment, WatchTasks and SaveSnapshot, and they are
// served as long streams: WatchStatus outlives the write timeout while each
// message goes out in time.
func TestWatchStatusIsALongStream(t *testing.T) {
	if got, want := dispatch.StreamingProcedures(), []string{xcev1connect.ControllerServiceWatchStatusProcedure,
		xcev1connect.ControllerServiceWatchAssignmentProcedure, xcev1connect.ControllerServiceWatchTasksProcedure,
		xcev1connect.ClusterServiceSaveSnapshotProcedure}; !reflect.DeepEqual(got, want) {
		t.Fatalf("StreamingProcedures() = %v, want %v", got, want)
	}
	lim := netio.DefaultLimits()
	lim.WriteTimeout = 200 * time.Millisecond
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, lim)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := ts.svc.WatchStatus(ctx, connect.NewRequest(&xcev1.WatchStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no first status: %v", stream.Err())
	}
	opened := time.Now()
	// A quiet stream, well past the write timeout, then a role change.
	time.Sleep(3 * lim.WriteTimeout) // the quiet spell under test, not a wait for a condition
	node.setView(ha.View{Role: ha.RoleStandby, Term: 6, LeaderID: "n2"})
	if !stream.Receive() || stream.Msg().Role != xcev1.Role_ROLE_STANDBY {
		t.Fatalf("no status %v after the stream was quiet for %v: %v", stream.Msg(), time.Since(opened), stream.Err())
	}
}
