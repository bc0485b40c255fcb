package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// fakeClusterAPI is a ClusterService that records what it was sent and
// answers every call with refuse when set.
type fakeClusterAPI struct {
	xcev1connect.UnimplementedClusterServiceHandler

	mu     sync.Mutex
	refuse error
	sent   []any    // the requests, in order
	auth   []string // their Authorization headers
}

func (f *fakeClusterAPI) record(req connect.AnyRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, req.Any())
	f.auth = append(f.auth, req.Header().Get("Authorization"))
	return f.refuse
}

func (f *fakeClusterAPI) requests() []any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]any(nil), f.sent...)
}

var fakeMembers = []*xcev1.Member{
	{Id: "n1", PeerAddr: "127.0.0.1:7201", ClientAddr: "127.0.0.1:7101", Voter: true, Healthy: true, LastContactMs: 0, Primary: true, State: "voter"},
	{Id: "n2", PeerAddr: "127.0.0.1:7202", ClientAddr: "127.0.0.1:7102", Voter: true, Healthy: true, LastContactMs: 40, Lag: 2, State: "voter"},
	{Id: "n4", PeerAddr: "127.0.0.1:7204", Voter: false, Healthy: false, LastContactMs: -1, Lag: 1500, State: "catching_up"},
}

func (f *fakeClusterAPI) ListMembers(_ context.Context, req *connect.Request[xcev1.ListMembersRequest]) (*connect.Response[xcev1.ListMembersResponse], error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.ListMembersResponse{Members: fakeMembers, ConfigurationIndex: 12}), nil
}

func (f *fakeClusterAPI) AddMember(_ context.Context, req *connect.Request[xcev1.AddMemberRequest]) (*connect.Response[xcev1.AddMemberResponse], error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.AddMemberResponse{Member: &xcev1.Member{Id: req.Msg.Id, PeerAddr: req.Msg.PeerAddr,
		ClientAddr: req.Msg.ClientAddr, LastContactMs: -1, State: "catching_up"}}), nil
}

func (f *fakeClusterAPI) PromoteMember(_ context.Context, req *connect.Request[xcev1.PromoteMemberRequest]) (*connect.Response[xcev1.PromoteMemberResponse], error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.PromoteMemberResponse{Member: &xcev1.Member{Id: req.Msg.Id, PeerAddr: "127.0.0.1:7204", Voter: true, Healthy: true, State: "voter"}}), nil
}

func (f *fakeClusterAPI) RemoveMember(_ context.Context, req *connect.Request[xcev1.RemoveMemberRequest]) (*connect.Response[xcev1.RemoveMemberResponse], error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.RemoveMemberResponse{}), nil
}

func (f *fakeClusterAPI) TransferLeader(_ context.Context, req *connect.Request[xcev1.TransferLeaderRequest]) (*connect.Response[xcev1.TransferLeaderResponse], error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	to := req.Msg.To
	if to == "" {
		to = "n2"
	}
	return connect.NewResponse(&xcev1.TransferLeaderResponse{LeaderId: to}), nil
}

func startClusterAPI(t *testing.T, f *fakeClusterAPI) string {
	t.Helper()
	path, h := xcev1connect.NewClusterServiceHandler(f)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestMembersList(t *testing.T) {
	f := &fakeClusterAPI{}
	addr := startClusterAPI(t, f)
	out, code := runCmd(t, membersCmd(), "list", "--addr", addr, "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, out)
	}
	var got struct {
		ConfigurationIndex uint64           `json:"configuration_index"`
		Members            []map[string]any `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.ConfigurationIndex != 12 || len(got.Members) != 3 {
		t.Fatalf("json %s", out)
	}
	for _, m := range got.Members {
		for _, k := range []string{"id", "peer_addr", "client_addr", "voter", "healthy", "last_contact_ms", "lag", "primary", "state"} {
			if _, ok := m[k]; !ok {
				t.Errorf("member without %q: %v", k, m)
			}
		}
	}
	n1, n4 := got.Members[0], got.Members[2]
	if n1["id"] != "n1" || n1["voter"] != true || n1["healthy"] != true || n1["primary"] != true {
		t.Errorf("n1 %v", n1)
	}
	if n4["voter"] != false || n4["healthy"] != false || n4["client_addr"] != "" || n4["last_contact_ms"] != -1.0 || n4["lag"] != 1500.0 {
		t.Errorf("n4 %v", n4)
	}
	if req, ok := f.requests()[0].(*xcev1.ListMembersRequest); !ok || req.Consistency != xcev1.Consistency_CONSISTENCY_LINEARIZABLE {
		t.Errorf("request %v, want a linearizable list", f.requests()[0])
	}

	out, code = runCmd(t, membersCmd(), "list", "--addr", addr, "--stale")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, out)
	}
	if req := f.requests()[1].(*xcev1.ListMembersRequest); req.Consistency != xcev1.Consistency_CONSISTENCY_STALE {
		t.Errorf("--stale sent %v", req.Consistency)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || lines[0] != "configuration index 12, 3 members, 2 voters" {
		t.Fatalf("table:\n%s", out)
	}
	for i, want := range [][]string{
		{"ID", "PEER", "CLIENT", "VOTER", "HEALTHY", "LAST CONTACT", "LAG", "STATE", "ROLE"},
		{"n1", "127.0.0.1:7201", "127.0.0.1:7101", "voter", "yes", "0s", "0", "PRIMARY"},
		{"n2", "127.0.0.1:7202", "127.0.0.1:7102", "voter", "yes", "40ms", "2"},
		{"n4", "127.0.0.1:7204", " - ", "non-voter", "no", "unknown", "1500", "catching_up"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("line %q without %q", lines[i+1], w)
			}
		}
	}
	if strings.Contains(lines[3], "PRIMARY") || strings.Contains(lines[4], "PRIMARY") {
		t.Errorf("a standby marked PRIMARY:\n%s", out)
	}
}

func TestMembersChanges(t *testing.T) {
	f := &fakeClusterAPI{}
	addr := startClusterAPI(t, f)
	for _, tc := range []struct {
		cmd  func() *cobra.Command
		args []string
		sent any
		out  string
	}{
		{membersCmd, []string{"add", "--id", "n4", "--peer-addr", "127.0.0.1:7204", "--client-addr", "127.0.0.1:7104"},
			&xcev1.AddMemberRequest{Id: "n4", PeerAddr: "127.0.0.1:7204", ClientAddr: "127.0.0.1:7104"},
			"added n4 (peer 127.0.0.1:7204, client 127.0.0.1:7104): non-voter, catching_up\n"},
		{membersCmd, []string{"promote", "n4"}, &xcev1.PromoteMemberRequest{Id: "n4"}, "promoted n4 (peer 127.0.0.1:7204, client ): voter, voter\n"},
		{membersCmd, []string{"remove", "n4"}, &xcev1.RemoveMemberRequest{Id: "n4"}, "removed n4\n"},
		{membersCmd, []string{"remove", "n3", "--force"}, &xcev1.RemoveMemberRequest{Id: "n3", Force: true}, "removed n3\n"},
		{leaderCmd, []string{"transfer"}, &xcev1.TransferLeaderRequest{}, "n2 is PRIMARY\n"},
		{leaderCmd, []string{"transfer", "--to", "n3"}, &xcev1.TransferLeaderRequest{To: "n3"}, "n3 is PRIMARY\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			before := len(f.requests())
			out, code := runCmd(t, tc.cmd(), append(tc.args, "--addr", addr)...)
			if code != exitOK || out != tc.out {
				t.Errorf("exit %d, output %q, want %q", code, out, tc.out)
			}
			reqs := f.requests()[before:]
			// An untargeted transfer first notes the PRIMARY.
			if _, ok := tc.sent.(*xcev1.TransferLeaderRequest); ok && tc.sent.(*xcev1.TransferLeaderRequest).To == "" && len(reqs) == 2 {
				reqs = reqs[1:]
			}
			if len(reqs) != 1 || !protoEqual(reqs[0], tc.sent) {
				t.Errorf("sent %v, want %v", reqs, tc.sent)
			}
		})
	}

	out, code := runCmd(t, membersCmd(), "add", "--addr", addr, "--json", "--id", "n5", "--peer-addr", "127.0.0.1:7205")
	var got map[string]map[string]any
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	if m := got["member"]; m["id"] != "n5" || m["voter"] != false || m["peer_addr"] != "127.0.0.1:7205" {
		t.Errorf("json %s", out)
	}
	out, code = runCmd(t, leaderCmd(), "transfer", "--addr", addr, "--json", "--to", "n1")
	if code != exitOK || strings.TrimSpace(out) != `{
  "leader_id": "n1"
}` {
		t.Errorf("exit %d: %s", code, out)
	}
}

func protoEqual(a, b any) bool {
	ma, ok1 := a.(proto.Message)
	mb, ok2 := b.(proto.Message)
	return ok1 && ok2 && proto.Equal(ma, mb)
}

// TestMembersCredentials: --token and XCE_TOKEN reach the node as a bearer
// token.
func TestMembersCredentials(t *testing.T) {
	f := &fakeClusterAPI{}
	addr := startClusterAPI(t, f)
	if _, code := runCmd(t, membersCmd(), "list", "--addr", addr, "--token", "s3cret"); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	t.Setenv("XCE_TOKEN", "from-env")
	if _, code := runCmd(t, leaderCmd(), "transfer", "--addr", addr, "--to", "n2"); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.auth) != 2 || f.auth[0] != "Bearer s3cret" || f.auth[1] != "Bearer from-env" {
		t.Errorf("authorization headers %q", f.auth)
	}
}

func TestMembersExitCodes(t *testing.T) {
	for _, tc := range []struct {
		code connect.Code
		want int
		msg  string
	}{
		{connect.CodeUnauthenticated, exitUnauthenticated, "Unauthenticated: no credentials"},
		{connect.CodePermissionDenied, exitPermissionDenied, "PermissionDenied: no credentials"},
		{connect.CodeFailedPrecondition, exitOther, "refused in the cluster's current state: no credentials (--force removes it anyway)"},
		{connect.CodeNotFound, exitNotFound, "not found: no credentials"},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			f := &fakeClusterAPI{refuse: connect.NewError(tc.code, errors.New("no credentials"))}
			addr := startClusterAPI(t, f)
			cmd := membersCmd()
			var errOut strings.Builder
			cmd.SetArgs([]string{"remove", "n3", "--addr", addr})
			cmd.SetOut(&errOut)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			err := cmd.Execute()
			if got := exitCodeQuiet(err); got != tc.want {
				t.Errorf("exit %d, want %d (%v)", got, tc.want, err)
			}
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %v, want it to say %q", err, tc.msg)
			}
			if n := len(f.requests()); n != 1 {
				t.Errorf("sent %d times, want once", n)
			}
		})
	}
	f := &fakeClusterAPI{refuse: connect.NewError(connect.CodePermissionDenied, errors.New("needs members"))}
	addr := startClusterAPI(t, f)
	for _, args := range [][]string{
		{"list"}, {"add", "--id", "n4", "--peer-addr", "127.0.0.1:7204"}, {"promote", "n4"},
	} {
		if _, code := runCmd(t, membersCmd(), append(args, "--addr", addr)...); code != exitPermissionDenied {
			t.Errorf("%v: exit %d, want %d", args, code, exitPermissionDenied)
		}
	}
	if _, code := runCmd(t, leaderCmd(), "transfer", "--to", "n2", "--addr", addr); code != exitPermissionDenied {
		t.Errorf("transfer: exit %d, want %d", code, exitPermissionDenied)
	}
}

// TestMembersBadInput: bad input is a usage error and nothing is sent.
func TestMembersBadInput(t *testing.T) {
	f := &fakeClusterAPI{}
	addr := startClusterAPI(t, f)
	for _, tc := range []struct {
		name string
		cmd  func() *cobra.Command
		args []string
	}{
		{"add without id", membersCmd, []string{"add", "--peer-addr", "127.0.0.1:7204"}},
		{"add bad id", membersCmd, []string{"add", "--id", "a b", "--peer-addr", "127.0.0.1:7204"}},
		{"add without peer", membersCmd, []string{"add", "--id", "n4"}},
		{"add peer without port", membersCmd, []string{"add", "--id", "n4", "--peer-addr", "127.0.0.1"}},
		{"add unspecified peer", membersCmd, []string{"add", "--id", "n4", "--peer-addr", "0.0.0.0:7204"}},
		{"add bad client", membersCmd, []string{"add", "--id", "n4", "--peer-addr", "127.0.0.1:7204", "--client-addr", "x:99999"}},
		{"remove without id", membersCmd, []string{"remove"}},
		{"remove two ids", membersCmd, []string{"remove", "n1", "n2"}},
		{"remove bad id", membersCmd, []string{"remove", "n/1"}},
		{"promote without id", membersCmd, []string{"promote"}},
		{"list argument", membersCmd, []string{"list", "extra"}},
		{"list unknown flag", membersCmd, []string{"list", "--nope"}},
		{"transfer bad to", leaderCmd, []string{"transfer", "--to", "a b"}},
		{"transfer argument", leaderCmd, []string{"transfer", "n2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, code := runCmd(t, tc.cmd(), append(tc.args, "--addr", addr)...); code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
		})
	}
	for _, bad := range []string{"localhost", "127.0.0.1:0", addr + ",nohost:x", ""} {
		if _, code := runCmd(t, membersCmd(), "list", "--addr", bad); code != exitUsage {
			t.Errorf("--addr %q: exit %d, want %d", bad, code, exitUsage)
		}
		if _, code := runCmd(t, membersCmd(), "remove", "n3", "--addr", bad); code != exitUsage {
			t.Errorf("remove --addr %q: exit %d, want %d", bad, code, exitUsage)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("bad input sent %d requests: %v", n, f.requests())
	}
}
