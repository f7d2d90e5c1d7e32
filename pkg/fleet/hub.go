package fleet

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// hubWaitRetry is how often a request retries the dial to a hub that
// refuses connections, and hubWaitMax how long it waits at most, unless
// its context ends first. The cap ends requests made without a deadline,
// such as discovery's, in a long outage; a reflector whose request hit it
// backs off one step, a few seconds at first, and waits again.
const (
	hubWaitRetry = 250 * time.Millisecond
	hubWaitMax   = 30 * time.Second
)

// withHubTransport returns a copy of cfg whose round trips wait for a hub
// that refuses connections and log the hub's denials.
//
// The wait is gRPC's wait-for-ready. Without it, a reflector whose list
// or watch fails steps client-go's backoff (0.8 s doubling, up to 30 s
// plus jitter) once per failure, so after an outage of 20 s an informer
// may sleep half a minute past the hub's return. A request that waits
// instead does not fail, and is sent the moment the hub listens again.
// Only a refused or unreachable dial is retried, so nothing was sent
// and a retry is safe for every verb. The request's context still
// bounds the wait: a leader election renewal fails at its deadline, as
// without the wait. The transport itself is client-go's, shared and
// cached as usual: only the wrapper is added.
func withHubTransport(cfg *rest.Config, log logr.Logger) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	denials := &hubDenials{log: log, logged: map[hubDenial]bool{}}
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return &hubRoundTripper{next: next, clock: clock.RealClock{}, denials: denials}
	})
	return cfg
}

type hubRoundTripper struct {
	next    http.RoundTripper
	clock   clock.Clock
	denials *hubDenials
}

func (t *hubRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	deadline := t.clock.Now().Add(hubWaitMax)
	for {
		resp, err := t.next.RoundTrip(req)
		if err == nil {
			if resp.StatusCode == http.StatusForbidden {
				t.denials.observe(req)
			}
			return resp, nil
		}
		if !hubDown(err) || !t.clock.Now().Before(deadline) {
			return nil, err
		}
		if req.Body != nil && req.Body != http.NoBody {
			// The transport closed the body: send a fresh one.
			if req.GetBody == nil {
				return nil, err
			}
			body, bodyErr := req.GetBody()
			if bodyErr != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
		select {
		case <-req.Context().Done():
			return nil, err
		case <-t.clock.After(hubWaitRetry):
		}
	}
}

// hubDown reports whether err says the hub is not listening or not
// reachable, before anything was sent.
func hubDown(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// hubDenial is one kind of request the hub forbade.
type hubDenial struct {
	verb, resource, namespace string
}

// hubDenials logs each kind of denial once: a manager whose RBAC lacks a
// rule would otherwise say so on every retry, or, for an informer, only
// at a verbosity nobody runs.
type hubDenials struct {
	log logr.Logger

	mu     sync.Mutex
	logged map[hubDenial]bool
}

func (d *hubDenials) observe(req *http.Request) {
	denial := parseHubRequest(req)
	d.mu.Lock()
	seen := d.logged[denial]
	d.logged[denial] = true
	d.mu.Unlock()
	if seen {
		return
	}
	d.log.Error(fmt.Errorf("forbidden: %s %s", denial.verb, denial.resource),
		"The hub denied a request: grant the manager's user this verb on this resource",
		"verb", denial.verb, "resource", denial.resource, "namespace", denial.namespace)
}

// hubRequests reads the verb, resource and namespace of a hub request as
// the API server does.
var hubRequests = &apirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// parseHubRequest names the verb, the resource (group-qualified, with
// its subresource) and the namespace of req. A request for another path,
// such as /version, names the path.
func parseHubRequest(req *http.Request) hubDenial {
	info, err := hubRequests.NewRequestInfo(req)
	if err != nil || !info.IsResourceRequest {
		return hubDenial{verb: strings.ToLower(req.Method), resource: req.URL.Path}
	}
	d := hubDenial{verb: info.Verb, resource: info.Resource, namespace: info.Namespace}
	if info.APIGroup != "" {
		d.resource += "." + info.APIGroup
	}
	if info.Subresource != "" {
		d.resource += "/" + info.Subresource
	}
	return d
}
