package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xce/xce/auth"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// Permissions maps every procedure of the API to the permission it needs
// (docs/operations.md, "TLS and permissions on the client port"). The
// authorizer refuses a procedure missing from it.
var Permissions = map[string]auth.Permission{
	xcev1connect.ControllerServiceStatusProcedure:          auth.PermStatus,
	xcev1connect.ControllerServiceWatchStatusProcedure:     auth.PermCluster,
	xcev1connect.ControllerServiceGetTaskProcedure:         auth.PermRead,
	xcev1connect.ControllerServiceListTasksProcedure:       auth.PermRead,
	xcev1connect.ControllerServiceGetAssignmentProcedure:   auth.PermRead,
	xcev1connect.ControllerServiceWatchAssignmentProcedure: auth.PermRead,
	xcev1connect.ControllerServiceWatchTasksProcedure:      auth.PermRead,
	xcev1connect.ControllerServiceListWorkersProcedure:     auth.PermRead,
	xcev1connect.ControllerServiceSubmitTaskProcedure:      auth.PermWrite,
	xcev1connect.ControllerServiceDeleteTaskProcedure:      auth.PermDelete,
	xcev1connect.WorkerServiceRegisterProcedure:            auth.PermWorker,
	xcev1connect.WorkerServiceHeartbeatProcedure:           auth.PermWorker,
	xcev1connect.ControllerServiceDrainWorkerProcedure:     auth.PermDrain,
	xcev1connect.ControllerServiceUndrainWorkerProcedure:   auth.PermDrain,
	// A freeze steers where work runs, as a drain does.
	xcev1connect.ControllerServiceFreezePlacementProcedure:   auth.PermDrain,
	xcev1connect.ControllerServiceUnfreezePlacementProcedure: auth.PermDrain,
	xcev1connect.ClusterServiceListMembersProcedure:          auth.PermCluster,
	xcev1connect.ClusterServiceAddMemberProcedure:            auth.PermMembers,
	xcev1connect.ClusterServicePromoteMemberProcedure:        auth.PermMembers,
	xcev1connect.ClusterServiceRemoveMemberProcedure:         auth.PermMembers,
	xcev1connect.ClusterServiceTransferLeaderProcedure:       auth.PermMembers,
	xcev1connect.ClusterServiceJoinProcedure:                 auth.PermJoin,
	xcev1connect.ClusterServiceSaveSnapshotProcedure:         auth.PermBackup,
	xcev1connect.ClusterServiceTakeSnapshotProcedure:         auth.PermBackup,
}

// Option configures New.
type Option func(*Service)

// WithAuth enforces a's permissions on every call, before the gate (when a
// enforces any: auth.Authenticator.Enforced).
func WithAuth(a *auth.Authenticator) Option { return func(s *Service) { s.authn = a } }

// Security is what Status shows of the node's TLS and permissions.
type Security struct {
	Insecure bool
	// CertExpiry and PeerCertExpiry report the client and peer ports'
	// certificates' expiry (zero: no TLS on that port); nil: none.
	CertExpiry, PeerCertExpiry func() time.Time
}

// WithSecurity shows sec in Status.
func WithSecurity(sec Security) Option { return func(s *Service) { s.sec = sec } }

// authz is the interceptor that identifies the caller and checks that it
// may call the method, before the gate: nothing it refuses reaches the
// gate, a handler or Apply.
type authz struct {
	s       *Service
	refused *prometheus.CounterVec
}

type workerRequest interface{ GetWorkerId() string }

type joinRequest interface{ GetId() string }

// check is nil when the caller may call procedure with req.
func (a *authz) check(ctx context.Context, procedure string, h http.Header, req any) error {
	err := a.decide(ctx, procedure, h, req)
	if err != nil {
		a.refused.WithLabelValues(procedure, connect.CodeOf(err).String()).Inc()
	}
	return err
}

func (a *authz) decide(ctx context.Context, procedure string, h http.Header, req any) error {
	perm, ok := Permissions[procedure]
	if !ok {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s has no permission declared", procedure))
	}
	p, err := a.s.authn.Identify(h, auth.TLSFrom(ctx))
	if err != nil {
		return connect.NewError(connect.CodeUnauthenticated, err)
	}
	if !p.Can(perm) {
		return connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s (%s, roles %v) lacks permission %q for %s", p.Name, p.Via, p.Roles, perm, procedure))
	}
	if perm == auth.PermWorker {
		w, ok := req.(workerRequest)
		if !ok {
			return connect.NewError(connect.CodePermissionDenied, errors.New("no worker id in the request"))
		}
		if id := w.GetWorkerId(); !p.MaySpeakAs(id) {
			return connect.NewError(connect.CodePermissionDenied,
				fmt.Errorf("%s (%s) lacks permission %q as worker %q: it speaks only as worker %q", p.Name, p.Via, perm, id, p.WorkerID()))
		}
	}
	if perm == auth.PermJoin {
		j, ok := req.(joinRequest)
		if !ok {
			return connect.NewError(connect.CodePermissionDenied, errors.New("no node id in the request"))
		}
		if id := j.GetId(); !p.MayJoinAs(id) {
			return connect.NewError(connect.CodePermissionDenied,
				fmt.Errorf("%s (%s) lacks permission %q as node %q: a node joins only as itself", p.Name, p.Via, perm, id))
		}
	}
	return nil
}

func (a *authz) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := a.check(ctx, req.Spec().Procedure, req.Header(), req.Any()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (a *authz) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a *authz) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := a.check(ctx, conn.Spec().Procedure, conn.RequestHeader(), nil); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// withTLS records each request's TLS state for the authorizer.
func withTLS(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			r = r.WithContext(auth.WithTLS(r.Context(), r.TLS))
		}
		h.ServeHTTP(w, r)
	})
}

// securityStatus fills Status's security fields.
func (s *Service) securityStatus(st *xcev1.StatusResponse) {
	st.Insecure = s.sec.Insecure
	st.Auth = "off"
	if s.authn.Enforced() {
		st.Auth = "on"
	}
	st.TlsCertExpiry = rfc3339(s.sec.CertExpiry)
	st.PeerTlsCertExpiry = rfc3339(s.sec.PeerCertExpiry)
}

func rfc3339(f func() time.Time) string {
	if f == nil {
		return ""
	}
	if t := f(); !t.IsZero() {
		return t.UTC().Format(time.RFC3339)
	}
	return ""
}

// AuthRefusedMetric counts refused calls by method and code:
// xce_auth_refused_total{method,code}. The /metrics guard counts under
// method "/metrics".
func newAuthRefused(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xce_auth_refused_total", Help: "Calls refused by the client port's permissions, by method and code (unauthenticated, permission_denied).",
	}, []string{"method", "code"})
	reg.MustRegister(c)
	return c
}
