package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/xce/xce/tlsconf"
)

func hashOf(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

func TestParseTokens(t *testing.T) {
	good := "# comment\n\n" + hashOf("a") + " alice admin\n" + strings.ToUpper(hashOf("r")) + "  bob reader,writer,reader\n- carol reader\n" + hashOf("w") + " w1 worker\n"
	tk, err := ParseTokens(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if tk.Len() != 3 {
		t.Fatalf("tokens: %d", tk.Len())
	}
	if p, ok := tk.lookup("r"); !ok || p.Name != "bob" || !slices.Equal(p.Roles, []Role{Reader, Writer}) {
		t.Fatalf("bob: %+v %v", p, ok)
	}
	if _, ok := tk.lookup("nope"); ok {
		t.Fatal("unknown token found")
	}
	if !slices.Equal(tk.roles["carol"], []Role{Reader}) {
		t.Fatalf("carol: %v", tk.roles["carol"])
	}
	for _, c := range []struct{ in, want string }{
		{"abc alice admin\n", "line 1: the hash is not 64 hex"},
		{"\n" + hashOf("a") + " alice\n", "line 2: want"},
		{hashOf("a") + " alice root\n", `line 1: unknown role "root"`},
		{hashOf("a") + " alice admin\n" + hashOf("a") + " bob reader\n", "line 2: the same token as line 1"},
		{strings.Repeat("zz", 32) + " alice admin\n", "line 1: the hash is not 64 hex"},
		{hashOf("a") + " alice admin,\n", `line 1: unknown role ""`},
	} {
		_, err := ParseTokens(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), hashOf("a")) {
			t.Errorf("error quotes a hash: %v", err)
		}
	}
}

func FuzzParseTokens(f *testing.F) {
	f.Add("# c\n" + hashOf("a") + " alice admin,reader\n- bob worker\n")
	f.Add("x y z\n")
	f.Fuzz(func(t *testing.T, in string) {
		tk, err := ParseTokens(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, e := range tk.entries {
			if e.principal == "" || len(e.roles) == 0 {
				t.Fatalf("entry without principal or roles: %+v", e)
			}
			for _, r := range e.roles {
				if _, ok := Grants[r]; !ok {
					t.Fatalf("unknown role %q accepted", r)
				}
			}
		}
	})
}

func TestGrants(t *testing.T) {
	want := map[Role]map[Permission]bool{
		Admin:  {PermStatus: true, PermCluster: true, PermRead: true, PermMetrics: true, PermWrite: true, PermDelete: true, PermWorker: true},
		Writer: {PermStatus: true, PermCluster: true, PermRead: true, PermMetrics: true, PermWrite: true},
		Reader: {PermStatus: true, PermCluster: true, PermRead: true, PermMetrics: true},
		// A worker reads Status (its library follows the members) and
		// nothing else.
		Worker: {PermStatus: true, PermWorker: true},
	}
	all := []Permission{PermStatus, PermCluster, PermRead, PermMetrics, PermWrite, PermDelete, PermWorker}
	for r, perms := range want {
		p := Principal{Roles: []Role{r}}
		for _, perm := range all {
			if p.Can(perm) != perms[perm] {
				t.Errorf("%s can %s: %v", r, perm, p.Can(perm))
			}
		}
	}
	w := Principal{Name: "worker:w1", Roles: []Role{Worker}}
	if !w.MaySpeakAs("w1") || w.MaySpeakAs("w2") {
		t.Error("a worker speaks only as itself")
	}
	if !(Principal{Name: "w3", Roles: []Role{Worker}}).MaySpeakAs("w3") {
		t.Error("a token principal speaks as its name")
	}
	if !(Principal{Name: "root", Roles: []Role{Admin}}).MaySpeakAs("any") {
		t.Error("an admin speaks as any worker")
	}
	fleet := Principal{Name: "worker:*", Roles: []Role{Worker}}
	if !fleet.MaySpeakAs("xce-worker-7f9c-abcde") || !fleet.MaySpeakAs("w2") || fleet.Can(PermRead) {
		t.Error("a fleet's token speaks as any worker, and does no more than a worker")
	}
	if (Principal{Name: "*", Roles: []Role{Reader}}).MaySpeakAs("w1") {
		t.Error("a reader named * is no worker")
	}
	if (Principal{Name: "w1", Roles: []Role{Reader}}).MaySpeakAs("w1") {
		t.Error("a reader is no worker")
	}
}

func TestIdentifyToken(t *testing.T) {
	tk, err := ParseTokens(strings.NewReader(hashOf("sekrit") + " alice writer\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := New(Config{Cluster: "c", Tokens: tk, ClientAuth: tlsconf.ClientAuthNone})
	if !a.Enforced() || (*Authenticator)(nil).Enforced() || New(Config{ClientAuth: tlsconf.ClientAuthNone}).Enforced() {
		t.Fatal("Enforced")
	}
	h := http.Header{}
	if _, err := a.Identify(h, nil); err == nil || !strings.Contains(err.Error(), "no credentials") {
		t.Fatalf("no credentials: %v", err)
	}
	h.Set("Authorization", "Bearer wrong")
	if _, err := a.Identify(h, nil); err == nil || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("wrong token: %v", err)
	}
	h.Set("Authorization", "Bearer sekrit")
	if p, err := a.Identify(h, nil); err != nil || p.Name != "alice" || !p.Can(PermWrite) || p.Can(PermDelete) {
		t.Fatalf("alice: %+v %v", p, err)
	}
	anon := New(Config{Tokens: tk, ClientAuth: tlsconf.ClientAuthNone, Anonymous: Reader})
	if p, err := anon.Identify(http.Header{}, nil); err != nil || !p.Can(PermRead) || p.Can(PermWrite) {
		t.Fatalf("anonymous reader: %+v %v", p, err)
	}
	req := New(Config{Tokens: tk, ClientAuth: tlsconf.ClientAuthRequired, Anonymous: Reader})
	if _, err := req.Identify(h, nil); err == nil || !strings.Contains(err.Error(), "client certificate") {
		t.Fatalf("required without certificate: %v", err)
	}
}
