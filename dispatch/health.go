package dispatch

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/xce/xce/auth"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// HealthServices are the service names the gRPC health service answers
// for, besides "" (the node as a whole): every one shares the node's
// status, since one role serves them all.
var HealthServices = []string{
	xcev1connect.ControllerServiceName,
	xcev1connect.WorkerServiceName,
	xcev1connect.ClusterServiceName,
}

// checker answers the gRPC health checks from the node's view.
type checker struct{ s *Service }

func (c checker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if req.Service != "" && !healthService[req.Service] {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown service %q", req.Service))
	}
	commit, applied := c.s.node.Indexes()
	if ok, _ := ha.Serving(c.s.node.View(), commit, applied); ok {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
}

var healthService = func() map[string]bool {
	m := map[string]bool{}
	for _, s := range HealthServices {
		m[s] = true
	}
	return m
}()

// mountHealth serves the gRPC health checking protocol (grpc.health.v1)
// and server reflection on the client port. Health passes neither the
// permissions nor the gate: load balancers and probes carry no
// credentials, and the answer is what they ask whatever the role, like
// /healthz. Reflection describes the API to tools (grpcurl) and needs the
// cluster permission where permissions are on; it answers in every role.
func (s *Service) mountHealth(mux *http.ServeMux) {
	mux.Handle(grpchealth.NewHandler(checker{s}, connect.WithReadMaxBytes(MaxRequestBytes)))
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(MaxRequestBytes)}
	if s.authn.Enforced() {
		opts = append(opts, connect.WithInterceptors(&reflectAuthz{s: s}))
	}
	names := append([]string{grpchealth.HealthV1ServiceName}, HealthServices...)
	reflector := grpcreflect.NewStaticReflector(names...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, opts...))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, opts...))
}

// reflectAuthz requires the cluster permission for reflection.
type reflectAuthz struct{ s *Service }

func (r *reflectAuthz) check(ctx context.Context, procedure string, h http.Header) error {
	p, err := r.s.authn.Identify(h, auth.TLSFrom(ctx))
	if err != nil {
		err = connect.NewError(connect.CodeUnauthenticated, err)
	} else if !p.Can(auth.PermCluster) {
		err = connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s (%s, roles %v) lacks permission %q for %s", p.Name, p.Via, p.Roles, auth.PermCluster, procedure))
	}
	if err != nil {
		r.s.AuthRefused.WithLabelValues(procedure, connect.CodeOf(err).String()).Inc()
	}
	return err
}

func (r *reflectAuthz) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := r.check(ctx, req.Spec().Procedure, req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (r *reflectAuthz) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (r *reflectAuthz) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := r.check(ctx, conn.Spec().Procedure, conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
