package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/metrics"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
)

// meteredChildEnv, set in a child's environment, makes it run
// runMeteredChild: a fleet manager with the Propagation controller whose
// every figure the bench reads from outside, so that its CPU, memory and
// requests are its own and not the bench's.
const meteredChildEnv = "BENCH_METERED_CHILD"

// contentBuildsMetric counts the Propagation controller's content builds,
// if the manager exposes it; the figures of content builds are reported
// only then.
const contentBuildsMetric = "fleet_propagation_content_builds_total"

// meterReading is what a metered child reports of itself when asked:
// cumulative since its start, but for RSS and Engaged.
type meterReading struct {
	CPUSeconds float64 `json:"cpuSeconds"`
	// AllocBytes and Allocs are the heap allocations since the start
	// (runtime/metrics /gc/heap/allocs).
	AllocBytes uint64 `json:"allocBytes"`
	Allocs     uint64 `json:"allocs"`
	// RSSBytes is the RSS now, PeakRSSBytes the most since the start
	// (VmHWM).
	RSSBytes     int64 `json:"rssBytes"`
	PeakRSSBytes int64 `json:"peakRSSBytes"`
	// HubRequests and MemberRequests are client-go's requests
	// (rest_client_requests_total) to the hub's host and to every other.
	HubRequests    float64 `json:"hubRequests"`
	MemberRequests float64 `json:"memberRequests"`
	// Reconciles are the Propagation controller's reconciles by cluster
	// ("" for the hub requests), successful or not.
	Reconciles map[string]float64 `json:"reconciles"`
	// Successes are its successful reconciles by cluster.
	Successes map[string]float64 `json:"successes"`
	// ContentBuilds is contentBuildsMetric, nil if the manager has none.
	ContentBuilds *float64 `json:"contentBuilds,omitempty"`
	// Engaged counts the members the Propagation controller engaged.
	Engaged int `json:"engaged"`
	// At is when the reading was made.
	At time.Time `json:"at"`
}

// runMeteredChild runs a fleet manager of the fleet of -namespace with the
// Propagation controller and serves its readings as JSON on a local port,
// which its first report names, until it is stopped.
func runMeteredChild(args []string) int {
	fs := flag.NewFlagSet(childCommand, flag.ExitOnError)
	hubFile := fs.String("hub", "", "hub kubeconfig file")
	namespace := fs.String("namespace", "", "hub namespace of the registration Secrets")
	state := fs.String("state", "", "the journal's directory, which a restarted manager finds again")
	_ = fs.Parse(args)
	logf.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := meteredChild(ctx, *hubFile, *namespace, *state); err != nil {
		fmt.Fprintln(os.Stderr, "bench metered child:", err)
		return 1
	}
	return 0
}

func meteredChild(ctx context.Context, hubFile, namespace, state string) error {
	hub, err := clientcmd.BuildConfigFromFlags("", hubFile)
	if err != nil {
		return err
	}
	hubURL, err := url.Parse(hub.Host)
	if err != nil {
		return err
	}
	f, err := startPropFleetIn(hub, namespace, true, state)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return errors.Join(err, f.stop())
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r, err := readMeter(hubURL.Host, f)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(r)
	})}
	go func() { _ = srv.Serve(l) }()
	report(childReport{Event: "serving", Address: l.Addr().String()})
	<-ctx.Done()
	return errors.Join(srv.Close(), f.stop())
}

// readMeter reads the process's own figures.
func readMeter(hubHost string, f *propFleet) (meterReading, error) {
	r := meterReading{CPUSeconds: cpuSeconds(), Reconciles: map[string]float64{}, Successes: map[string]float64{}, Engaged: f.engaged(), At: time.Now()}
	samples := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/allocs:objects"}}
	metrics.Read(samples)
	r.AllocBytes, r.Allocs = samples[0].Value.Uint64(), samples[1].Value.Uint64()
	var err error
	if r.RSSBytes, err = procStatusKiB("/proc/self/status", "VmRSS"); err != nil {
		return r, err
	}
	if r.PeakRSSBytes, err = procStatusKiB("/proc/self/status", "VmHWM"); err != nil {
		return r, err
	}
	r.RSSBytes, r.PeakRSSBytes = r.RSSBytes<<10, r.PeakRSSBytes<<10
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return r, err
	}
	for _, mf := range families {
		switch mf.GetName() {
		case "rest_client_requests_total":
			for _, m := range mf.GetMetric() {
				if label(m, "host") == hubHost {
					r.HubRequests += m.GetCounter().GetValue()
				} else {
					r.MemberRequests += m.GetCounter().GetValue()
				}
			}
		case "fleet_reconciles_total":
			for _, m := range mf.GetMetric() {
				if label(m, "controller") != propagation.ControllerName {
					continue
				}
				cluster := label(m, "cluster")
				r.Reconciles[cluster] += m.GetCounter().GetValue()
				if label(m, "result") == "success" {
					r.Successes[cluster] += m.GetCounter().GetValue()
				}
			}
		case contentBuildsMetric:
			var n float64
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
			r.ContentBuilds = &n
		}
	}
	return r, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// meteredFleet is a metered child, seen from the bench.
type meteredFleet struct {
	c       *child
	address string
	started time.Time
}

// startMeteredFleet starts a metered child of the fleet of ns with gogc
// ("" for the manager's default). Its journal is stateDir(ns) of the
// bench's process, which outlives the child: a restarted one finds it,
// and the bench removes it.
func (b *bench) startMeteredFleet(ns, gogc string) (*meteredFleet, error) {
	started := time.Now()
	c, err := startChild(append(gogcEnv(gogc), meteredChildEnv+"=1"), "-hub="+b.lab.hubFile, "-namespace="+ns, "-state="+stateDir(ns))
	if err != nil {
		return nil, err
	}
	r, err := c.next(time.Minute)
	if err != nil {
		return nil, err
	}
	if r.Event != "serving" || r.Address == "" {
		c.kill()
		return nil, fmt.Errorf("metered child reported %q, not where it serves", r.Event)
	}
	return &meteredFleet{c: c, address: r.Address, started: started}, nil
}

func (m *meteredFleet) read(ctx context.Context) (meterReading, error) {
	var r meterReading
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.address+"/", nil)
	if err != nil {
		return r, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("metered child: %s", resp.Status)
	}
	return r, json.NewDecoder(resp.Body).Decode(&r)
}

// stop stops the child with SIGTERM.
func (m *meteredFleet) stop() error {
	_, err := m.c.stop(2 * time.Minute)
	return err
}

// awaitEngaged waits until the child's Propagation controller engaged n
// members.
func (m *meteredFleet) awaitEngaged(ctx context.Context, n int, timeout time.Duration) error {
	_, err := m.await(ctx, timeout, func(r meterReading) bool { return r.Engaged >= n }, func(r meterReading) string {
		return fmt.Sprintf("%d of %d members engaged within %s", r.Engaged, n, timeout)
	})
	return err
}

// awaitQuiet waits until the child's Propagation controller made no
// reconcile for quiet, and returns the last reading.
func (m *meteredFleet) awaitQuiet(ctx context.Context, quiet, timeout time.Duration) (meterReading, error) {
	last, err := m.read(ctx)
	if err != nil {
		return last, err
	}
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(quiet):
		}
		now, err := m.read(ctx)
		if err != nil {
			return now, err
		}
		if maps.Equal(now.Reconciles, last.Reconciles) {
			return now, nil
		}
		if time.Now().After(deadline) {
			return now, &measurementError{fmt.Sprintf("the manager still reconciled after %s", timeout)}
		}
		last = now
	}
}

// await reads the child every 100 ms until done holds, and returns that
// reading; past timeout, a measurementError with why's words.
func (m *meteredFleet) await(ctx context.Context, timeout time.Duration, done func(meterReading) bool, why func(meterReading) string) (meterReading, error) {
	deadline := time.Now().Add(timeout)
	for {
		r, err := m.read(ctx)
		if err != nil {
			return r, err
		}
		if done(r) {
			return r, nil
		}
		if time.Now().After(deadline) {
			return r, &measurementError{why(r)}
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
