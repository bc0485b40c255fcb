package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/browser"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
	"github.com/xce/xce/tlsconf"
)

// pageText is the text content of the first element sel matches in the
// console's tab ("" when none does).
func pageText(ctx context.Context, sel string) string {
	s, err := browser.Eval[string](ctx, 5*time.Second,
		fmt.Sprintf(`(document.querySelector(%q) || {textContent: ""}).textContent`, sel))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(s)
}

// waitPage polls the console's tab until cond holds, or fails t.
func waitPage(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := testutil.Poll(timeout, 50*time.Millisecond, cond); err != nil {
		t.Fatalf("the console: %s: %v", what, err)
	}
}

// tableActives is the Tasks table's active worker of each task on the page.
func tableActives(ctx context.Context) (map[string]string, error) {
	s, err := browser.Eval[string](ctx, 5*time.Second, `JSON.stringify(Object.fromEntries(
		[...document.querySelectorAll('#tasks-body tr')].map((r) => [r.dataset.task, r.querySelector('td.active').textContent])))`)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	return out, json.Unmarshal([]byte(s), &out)
}

// TestConsoleFollowsTheCluster drives the console in a real headless
// Chromium against three nodes and three workers: the PRIMARY's console
// shows the cluster, the workers with their copies, the tasks and the
// activity (a screenshot of each, light and dark, wide and narrow); a
// STANDBY's console names the PRIMARY and links to its console; after a
// SIGKILL of the PRIMARY it names the new one, without a reload, within 2 s
// of the cluster electing it; after a worker's death its tasks show on
// their new workers.
func TestConsoleFollowsTheCluster(t *testing.T) {
	const tasks = 6
	ctx := browser.New(t, browser.Options{})
	zones := map[string]string{"w1": "a", "w2": "b", "w3": "c"}
	c, ws := placementCluster(t, tasks, func(id string) []string {
		return []string{"--label", "zone=" + zones[id], "--label", "rack=r" + id[1:]}
	})
	settledPlacement(t, c, tasks, []string{"w1", "w2", "w3"}, raceSlack(30*time.Second))
	p := c.WaitRoles(raceSlack(5 * time.Second))
	primaryID := c.nodes[p].ID

	// The PRIMARY's console, page by page.
	if err := browser.Do(ctx, 20*time.Second, chromedp.EmulateViewport(1280, 800), chromedp.Navigate("http://"+c.Addrs()[p]+"/ui/#cluster")); err != nil {
		t.Fatal(err)
	}
	waitPage(t, raceSlack(10*time.Second), "names its PRIMARY", func() error {
		if got := pageText(ctx, "#primary-id"); got != primaryID {
			return fmt.Errorf("PRIMARY %q, want %q", got, primaryID)
		}
		if n := pageText(ctx, "#members-body"); !strings.Contains(n, c.nodes[(p+1)%3].ID) {
			return fmt.Errorf("members %q", n)
		}
		return nil
	})
	browser.Screenshot(t, ctx, "cluster")
	click := func(sel string) {
		t.Helper()
		if err := browser.Do(ctx, 10*time.Second, chromedp.Click(sel, chromedp.NodeVisible)); err != nil {
			t.Fatalf("click %s: %v", sel, err)
		}
	}
	click("#tab-workers")
	waitPage(t, raceSlack(10*time.Second), "lists the workers with their copies", func() error {
		got := pageText(ctx, "#workers-body")
		for _, w := range []string{"w1", "w2", "w3"} {
			if !strings.Contains(got, w) {
				return fmt.Errorf("workers %q, want %s", got, w)
			}
		}
		if !strings.Contains(got, "active") || !strings.Contains(got, "zone=b") {
			return fmt.Errorf("workers %q: no copies, or no labels", got)
		}
		return nil
	})
	browser.Screenshot(t, ctx, "workers")
	click("#tab-tasks")
	waitPage(t, raceSlack(10*time.Second), "lists the tasks where they run", func() error {
		a, err := tableActives(ctx)
		if err != nil || len(a) != tasks {
			return fmt.Errorf("tasks %v, %v", a, err)
		}
		for id, w := range a {
			if !strings.HasPrefix(w, "w") {
				return fmt.Errorf("task %s active %q", id, w)
			}
		}
		return nil
	})
	click(`#tasks-body tr[data-task="t00"]`)
	waitPage(t, raceSlack(5*time.Second), "shows a task's history", func() error {
		if got := pageText(ctx, "#task-moves"); !strings.Contains(got, "generation") {
			return fmt.Errorf("moves %q", got)
		}
		return nil
	})
	browser.Screenshot(t, ctx, "tasks")
	click("#tab-workers")
	if err := browser.Do(ctx, 10*time.Second, browser.ColorScheme("dark")); err != nil {
		t.Fatal(err)
	}
	browser.Screenshot(t, ctx, "workers-dark")
	if err := browser.Do(ctx, 10*time.Second, chromedp.EmulateViewport(420, 800), browser.ColorScheme("light")); err != nil {
		t.Fatal(err)
	}
	click("#tab-tasks")
	browser.Screenshot(t, ctx, "tasks-narrow")
	if err := browser.Do(ctx, 10*time.Second, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}

	// A STANDBY's console names the PRIMARY and links to its console.
	standby := (p + 1) % 3
	if err := browser.Do(ctx, 20*time.Second, chromedp.Navigate("http://"+c.Addrs()[standby]+"/ui/#tasks")); err != nil {
		t.Fatal(err)
	}
	waitPage(t, raceSlack(10*time.Second), "a STANDBY's console names the PRIMARY", func() error {
		if got := pageText(ctx, "#primary-id"); got != primaryID {
			return fmt.Errorf("PRIMARY %q, want %q", got, primaryID)
		}
		link, err := browser.Eval[string](ctx, 5*time.Second, `(document.querySelector('#banner a') || {href: ""}).href`)
		if err != nil || !strings.Contains(link, c.Addrs()[p]+"/ui/") {
			return fmt.Errorf("banner link %q, %v", link, err)
		}
		if a, err := tableActives(ctx); err != nil || len(a) != tasks {
			return fmt.Errorf("tasks %v, %v", a, err)
		}
		return nil
	})
	browser.Screenshot(t, ctx, "standby")

	// SIGKILL of the PRIMARY: the page names the new one, without a reload.
	marker, err := browser.Eval[bool](ctx, 5*time.Second, `window.notReloaded = true`)
	if err != nil || !marker {
		t.Fatalf("marking the page: %v", err)
	}
	killed := time.Now()
	c.Kill(p)
	np := c.WaitRoles(raceSlack(15 * time.Second))
	elected := time.Now()
	waitPage(t, 2*time.Second, "names the new PRIMARY within 2 s of its election", func() error {
		if got := pageText(ctx, "#primary-id"); got != c.nodes[np].ID {
			return fmt.Errorf("PRIMARY %q, want %q", got, c.nodes[np].ID)
		}
		return nil
	})
	t.Logf("the console named the new PRIMARY %s %v after the SIGKILL (%v after the test saw it elected)",
		c.nodes[np].ID, time.Since(killed).Round(time.Millisecond), time.Since(elected).Round(time.Millisecond))
	if ok, err := browser.Eval[bool](ctx, 5*time.Second, `window.notReloaded === true`); err != nil || !ok {
		t.Fatalf("the page was reloaded: %v %v", ok, err)
	}

	// A worker dies: its tasks show on their new workers.
	before, err := tableActives(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws.kill("w3")
	settledPlacement(t, c, tasks, []string{"w1", "w2"}, itSessionTimeout+raceSlack(30*time.Second))
	waitPage(t, raceSlack(10*time.Second), "shows w3's tasks on their new workers", func() error {
		a, err := c.assignment()
		if err != nil {
			return err
		}
		got, err := tableActives(ctx)
		if err != nil {
			return err
		}
		for _, ta := range a.Tasks {
			pl := ta.Placement
			if got[pl.TaskId] != pl.Active {
				return fmt.Errorf("task %s: the page says %q, the cluster %q (before: %v)", pl.TaskId, got[pl.TaskId], pl.Active, before)
			}
		}
		return nil
	})
	browser.Screenshot(t, ctx, "after-worker-death")
	click("#tab-activity")
	waitPage(t, raceSlack(5*time.Second), "lists the role change and the moves", func() error {
		got := pageText(ctx, "#activity-list")
		if !strings.Contains(got, c.nodes[np].ID+" is PRIMARY") || !strings.Contains(got, "active on") {
			return fmt.Errorf("activity %q", got)
		}
		return nil
	})
	browser.Screenshot(t, ctx, "activity")
	click("#tab-tasks")

	// The node behind the page goes: the page says the connection is
	// lost, and is live again once the node is back.
	c.Kill(standby)
	waitPage(t, raceSlack(10*time.Second), "shows a lost connection", func() error {
		if got := pageText(ctx, "#conn"); !strings.Contains(got, "connection lost") {
			return fmt.Errorf("connection %q", got)
		}
		return nil
	})
	browser.Screenshot(t, ctx, "connection-lost")
	c.Start(standby)
	waitPage(t, raceSlack(20*time.Second), "reconnects", func() error {
		if got := pageText(ctx, "#conn"); got != "live" {
			return fmt.Errorf("connection %q", got)
		}
		return nil
	})
}

// TestConsoleAsksForAToken: with permissions on, the console shows no data
// before a token is given (the API refuses it anyway); a reader's token
// shows the cluster without the actions that write; an admin's offers
// them, and a freeze asks for a confirmation before it is sent.
func TestConsoleAsksForAToken(t *testing.T) {
	ctx := browser.New(t, browser.Options{InsecureTLS: true})
	pki := t.TempDir()
	if err := tlsconf.CreateCA(pki, "it"); err != nil {
		t.Fatal(err)
	}
	ca, _ := tlsconf.CAFiles(pki)
	crt, key, err := tlsconf.CreateCert(pki, tlsconf.CertRequest{ID: tlsconf.Identity{Cluster: "it", Kind: tlsconf.KindNode, Name: "n1"}, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	hash := func(tok string) string { h := sha256.Sum256([]byte(tok)); return hex.EncodeToString(h[:]) }
	tokens := filepath.Join(pki, "tokens")
	if err := os.WriteFile(tokens, []byte(hash("admin-tok")+" root admin\n"+hash("reader-tok")+" viewer reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 1, WithConfig(func(cfg *configs.Config) {
		cfg.TLS = configs.ClientTLS{CAFile: ca, CertFile: crt, KeyFile: key, ClientAuth: "optional"}
		cfg.Auth = configs.Auth{TokensFile: tokens, Anonymous: "none"}
	}))
	c.Start(0)
	src, err := tlsconf.NewSource(tlsconf.Files{CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: src.ClientConfig("127.0.0.1", nil)}
	t.Cleanup(tr.CloseIdleConnections)
	api := xcev1connect.NewControllerServiceClient(&http.Client{Transport: testutil.Bearer{RT: tr, Token: "admin-tok"}, Timeout: 5 * time.Second}, "https://"+c.Addrs()[0])
	frozen := func() (bool, error) {
		st, err := api.Status(context.Background(), connect.NewRequest(&xcev1.StatusRequest{}))
		if err != nil {
			return false, err
		}
		if st.Msg.Role != xcev1.Role_ROLE_PRIMARY {
			return false, fmt.Errorf("n1 is %v", st.Msg.Role)
		}
		return st.Msg.PlacementFrozen, nil
	}
	testutil.Eventually(t, raceSlack(15*time.Second), "n1 is PRIMARY", func() bool {
		_, err := frozen()
		return err == nil
	})
	url := "https://" + c.Addrs()[0] + "/ui/#tasks"
	if err := browser.Do(ctx, 20*time.Second, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitPage(t, raceSlack(10*time.Second), "asks for a token", func() error {
		if vis, err := browser.Eval[bool](ctx, 5*time.Second, `!document.querySelector('#login').hidden`); err != nil || !vis {
			return fmt.Errorf("sign-in form not shown: %v", err)
		}
		return nil
	})
	// Nothing of the cluster is on the page: no node id, no task table,
	// no facts.
	body := pageText(ctx, "main")
	for _, sel := range []string{"#cluster-facts", "#members-body", "#tasks-body", "#workers-body", "#primary-id"} {
		if got := pageText(ctx, sel); got != "" {
			t.Fatalf("before a token the page shows %s: %q", sel, got)
		}
	}
	if strings.Contains(body, "n1") {
		t.Fatalf("before a token the page names the node: %q", body)
	}
	browser.Screenshot(t, ctx, "sign-in")

	signIn := func(token string) {
		t.Helper()
		if err := browser.Do(ctx, 10*time.Second, chromedp.SendKeys("#token", token, chromedp.NodeVisible), chromedp.Click("#login-form button", chromedp.NodeVisible)); err != nil {
			t.Fatal(err)
		}
	}
	signIn("wrong-tok")
	waitPage(t, raceSlack(5*time.Second), "refuses a wrong token", func() error {
		if got := pageText(ctx, "#login-error"); !strings.Contains(got, "not one this node knows") {
			return fmt.Errorf("error %q", got)
		}
		return nil
	})
	signIn("reader-tok")
	waitPage(t, raceSlack(10*time.Second), "shows the cluster to a reader", func() error {
		if got := pageText(ctx, "#primary-id"); got != "n1" {
			return fmt.Errorf("PRIMARY %q", got)
		}
		if got := pageText(ctx, "#who"); !strings.Contains(got, "viewer") {
			return fmt.Errorf("who %q", got)
		}
		return nil
	})
	if vis, err := browser.Eval[bool](ctx, 5*time.Second, `!document.querySelector('#cluster-actions').hidden`); err != nil || vis {
		t.Fatalf("a reader is offered actions: %v %v", vis, err)
	}
	tok, err := browser.Eval[string](ctx, 5*time.Second, `sessionStorage.getItem('xce.token') + ' ' + location.href`)
	if err != nil || !strings.HasPrefix(tok, "reader-tok ") || strings.Contains(strings.TrimPrefix(tok, "reader-tok "), "tok") {
		t.Fatalf("the token is kept in session storage only, never in the URL: %q %v", tok, err)
	}

	// An admin may freeze the placement, after a confirmation.
	if err := browser.Do(ctx, 10*time.Second, chromedp.Click("#who button", chromedp.NodeVisible)); err != nil {
		t.Fatal(err)
	}
	waitPage(t, raceSlack(10*time.Second), "signs out", func() error {
		if vis, err := browser.Eval[bool](ctx, 5*time.Second, `!document.querySelector('#login').hidden`); err != nil || !vis {
			return fmt.Errorf("sign-in form not shown: %v", err)
		}
		return nil
	})
	signIn("admin-tok")
	if err := browser.Do(ctx, 10*time.Second, chromedp.Click("#tab-cluster", chromedp.NodeVisible), chromedp.Click("#freeze", chromedp.NodeVisible)); err != nil {
		t.Fatal(err)
	}
	waitPage(t, raceSlack(5*time.Second), "asks to confirm the freeze", func() error {
		if open, err := browser.Eval[bool](ctx, 5*time.Second, `document.querySelector('#confirm').open`); err != nil || !open {
			return fmt.Errorf("no confirmation: %v", err)
		}
		return nil
	})
	if f, err := frozen(); err != nil || f {
		t.Fatalf("frozen before the confirmation: %v %v", f, err)
	}
	browser.Screenshot(t, ctx, "confirm")
	if err := browser.Do(ctx, 10*time.Second, chromedp.Click("#confirm-ok", chromedp.NodeVisible)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, raceSlack(10*time.Second), "the placement is frozen", func() bool {
		f, err := frozen()
		return err == nil && f
	})
	waitPage(t, raceSlack(5*time.Second), "shows the freeze", func() error {
		if got := pageText(ctx, "#freeze"); got != "Unfreeze placement" {
			return fmt.Errorf("button %q", got)
		}
		return nil
	})
}
