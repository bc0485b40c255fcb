package controller

import (
	"net/http"
	"net/http/pprof"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/netio"
	"github.com/xce/xce/persist"
)

type metrics struct {
	role        *prometheus.GaugeVec
	term        prometheus.Gauge
	writeQuorum prometheus.Gauge
	roleChanges *prometheus.CounterVec
	// conns are the client port's connection metrics (refusals under the
	// limits, connections open, caps in force).
	conns *netio.ConnMetrics
	// storageOK is 1 while the storage's writes succeed;
	// storageFailures counts its changes from working to failing.
	storageOK       prometheus.Gauge
	storageFailures prometheus.Counter
	storageFailing  bool
}

func newMetrics(reg *prometheus.Registry, n *Node) *metrics {
	m := &metrics{
		role: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "xce_role", Help: "1 for the node's current role, 0 for the others.",
		}, []string{"role"}),
		term:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "xce_term", Help: "Current Raft term."}),
		writeQuorum: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xce_write_quorum", Help: "1 while this node is PRIMARY with a write quorum."}),
		roleChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xce_role_changes_total", Help: "Role changes by from and to.",
		}, []string{"from", "to"}),
		conns: netio.NewConnMetrics(reg),
	}
	m.storageOK = prometheus.NewGauge(prometheus.GaugeOpts{Name: "xce_storage_healthy", Help: "1 while the node's storage writes succeed; 0 after a failed write or sync (a full disk), until one succeeds again."})
	m.storageFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "xce_storage_failures_total", Help: "Times the node's storage went from working to failing."})
	m.storageOK.Set(1)
	reg.MustRegister(m.role, m.term, m.writeQuorum, m.roleChanges, m.storageOK, m.storageFailures,
		// Scheduling latency and GC pauses show a CPU-starved node: a
		// goroutine that waits tens of milliseconds for a core is how a
		// leader misses its lease with short raft timeouts. The live heap
		// (as of the last collection) is what the state takes, without
		// the garbage the heap in use also counts.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/latencies:seconds$|^/sched/pauses/total/gc:seconds$|^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xce_applied_index", Help: "Last Raft index applied to the FSM."},
			func() float64 { _, a := n.Indexes(); return float64(a) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xce_commit_index", Help: "Last Raft index known committed."},
			func() float64 { c, _ := n.Indexes(); return float64(c) }),
	)
	m.setView(&ha.View{Role: ha.RoleInit})
	return m
}

func (m *metrics) setView(v *ha.View) {
	for _, r := range []ha.Role{ha.RoleInit, ha.RoleElecting, ha.RolePrimary, ha.RoleStandby} {
		val := 0.0
		if r == v.Role {
			val = 1
		}
		m.role.WithLabelValues(r.String()).Set(val)
	}
	m.term.Set(float64(v.Term))
	wq := 0.0
	if v.Serving() {
		wq = 1
	}
	m.writeQuorum.Set(wq)
}

// setStorage records the storage's health; only the event loop calls it.
func (m *metrics) setStorage(h persist.Health) {
	failing := h.Err != nil
	if failing && !m.storageFailing {
		m.storageFailures.Inc()
	}
	m.storageFailing = failing
	if failing {
		m.storageOK.Set(0)
	} else {
		m.storageOK.Set(1)
	}
}

// routes serves the API plus /healthz (the process runs), /readyz (PRIMARY
// with write quorum; with ?standby=1 also a STANDBY that serves), /metrics
// and the console (/ui/) on the client port. The port's health reserve
// (netio.Limits) serves /healthz and /readyz only.
func (n *Node) routes(api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		v := n.View()
		ok, reason := v.Serving(), v.Role.String()+": "+v.Reason
		if r.URL.Query().Get("standby") == "1" {
			// A member that serves, as the gRPC health check says: what a
			// StatefulSet's readiness wants of each of its pods.
			commit, applied := n.Indexes()
			ok, reason = ha.Serving(v, commit, applied)
		}
		if !ok {
			http.Error(w, "not ready: "+reason, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	var metrics http.Handler = promhttp.HandlerFor(n.opts.Registry, promhttp.HandlerOpts{})
	if n.opts.GuardMetrics != nil {
		metrics = n.opts.GuardMetrics(metrics)
	}
	mux.Handle("GET /metrics", metrics)
	if n.opts.Pprof {
		// Profiles and traces write for as long as they were asked to run.
		mux.Handle("/debug/pprof/", netio.LongStream(http.HandlerFunc(pprof.Index)))
		mux.Handle("/debug/pprof/profile", netio.LongStream(http.HandlerFunc(pprof.Profile)))
		mux.Handle("/debug/pprof/trace", netio.LongStream(http.HandlerFunc(pprof.Trace)))
	}
	if n.opts.Console != nil {
		mux.Handle("/ui/", n.opts.Console)
		mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	}
	if api != nil {
		mux.Handle("/", api)
	}
	return mux
}
