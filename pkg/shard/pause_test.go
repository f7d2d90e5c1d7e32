package shard_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	crzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
	"github.com/fleetkube/fleet-manager/pkg/shard"
)

// childReplicaEnv, set, makes the test binary a child replica
// (childReplicaMain) that the configuration it holds describes.
const childReplicaEnv = "FLEET_SHARD_TEST_CHILD_REPLICA"

// childReplica configures a child replica.
type childReplica struct {
	Name, Namespace, Kubeconfig string
	// Record is the file where the replica appends each reconcile.
	Record string
	// Objects is the namespace, in every member, of the ConfigMaps paced-<member>.
	Objects string
}

// pausedLease is the Lease of the replicas of TestPausedReplica: a 2 s
// margin between the renew deadline and the Lease, for a loaded machine.
func pausedLease(name string) *shard.Options {
	return &shard.Options{Name: name, LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond}
}

// pacedReconcile is how long a reconcile of TestPausedReplica waits
// between its two writes, heedless of its context.
const pacedReconcile = 150 * time.Millisecond

// interval is one reconcile of a member by a replica: from when it was
// handed to the reconciler to when it returned, and when each of its
// writes that the member took was sent.
type interval struct {
	Member, Replica string
	Start, End      time.Time
	Writes          []time.Time
}

// childReplicaMain runs a replica of a shared fleet until SIGTERM. Its one
// controller reconciles ConfigMap paced-<member> of each member it owns
// in a loop: it writes it, waits pacedReconcile, writes it again, and
// each write brings the next reconcile. Each reconcile of a member is
// appended to the record as a JSON line, also one the replica refused to
// act in: it was dispatched.
func childReplicaMain() int {
	var cr childReplica
	if err := json.Unmarshal([]byte(os.Getenv(childReplicaEnv)), &cr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := runChildReplica(cr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func runChildReplica(cr childReplica) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", cr.Kubeconfig)
	if err != nil {
		return err
	}
	record, err := os.OpenFile(cr.Record, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer record.Close()
	var recordMu sync.Mutex
	mgr, err := fleet.New(cfg, fleet.Options{
		Options: manager.Options{
			Logger:                 crzap.New(crzap.WriteTo(os.Stderr)),
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		},
		Namespace:              cr.Namespace,
		AllowDuplicateClusters: true,
		Shard:                  pausedLease(cr.Name),
	})
	if err != nil {
		return err
	}
	err = fleet.NewControllerManagedBy(mgr).Named("paced").
		For(&corev1.ConfigMap{}, fleet.WithPredicates(fleettest.InNamespace(cr.Objects))).
		// A worker per member, so that each member's loop runs on.
		WithOptions(fleet.ControllerOptions{TypedOptions: crcontroller.TypedOptions[fleet.Request]{MaxConcurrentReconciles: 12}, MaxConcurrentReconcilesPerCluster: 1}).
		Complete(fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
			if req.Name != "paced-"+req.ClusterName {
				return reconcile.Result{}, nil // another member name's, on the same API server
			}
			x := interval{Member: req.ClusterName, Replica: cr.Name, Start: time.Now()}
			cl, err := mgr.GetCluster(ctx, req.ClusterName)
			if err != nil {
				mgr.GetLogger().Info("Not acting on the member", "cluster", req.ClusterName, "err", err.Error())
			} else {
				for i := range 2 {
					if i > 0 {
						time.Sleep(pacedReconcile)
					}
					sent := time.Now()
					patch := fmt.Sprintf(`{"data":{"by":%q,"at":%q}}`, cr.Name, sent.Format(time.RFC3339Nano))
					obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cr.Objects, Name: req.Name}}
					// Heedless of ctx: a reconcile in flight when its replica fences goes on.
					if err := cl.GetClient().Patch(context.WithoutCancel(ctx), obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
						mgr.GetLogger().Info("Write refused", "cluster", req.ClusterName, "err", err.Error())
						break
					}
					x.Writes = append(x.Writes, sent)
				}
			}
			x.End = time.Now()
			line, _ := json.Marshal(x)
			recordMu.Lock()
			defer recordMu.Unlock()
			_, err = record.Write(append(line, '\n'))
			// Due again soon: a paused replica wakes up with every
			// member's request due at once.
			return reconcile.Result{RequeueAfter: 20 * time.Millisecond}, err
		}))
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// child is a child replica process.
type child struct {
	name, record string
	cmd          *exec.Cmd
	log          *bytes.Buffer
}

func startChild(t *testing.T, cr childReplica) *child {
	t.Helper()
	env, err := json.Marshal(cr)
	if err != nil {
		t.Fatal(err)
	}
	c := &child{name: cr.Name, record: cr.Record, log: &bytes.Buffer{}}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childReplicaEnv+"="+string(env))
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("replica %s logged:\n%s", c.name, c.log)
		}
	})
	return c
}

// stop ends the child as Kubernetes would, with SIGTERM, and waits.
func (c *child) stop(t *testing.T) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("replica %s exited with %v", c.name, err)
	}
	for _, bad := range []string{"panic:", "WARNING: DATA RACE", "fatal error:"} {
		if strings.Contains(c.log.String(), bad) {
			t.Errorf("replica %s logged %q", c.name, bad)
		}
	}
}

// intervals reads the reconciles the child recorded, whole lines only.
func (c *child) intervals(t *testing.T) []interval {
	t.Helper()
	data, err := os.ReadFile(c.record)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []interval
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var x interval
		if json.Unmarshal(sc.Bytes(), &x) == nil {
			out = append(out, x)
		}
	}
	return out
}

// TestPausedReplica runs two replicas as child processes, each a
// reconcile loop on every member it owns, stops the one that owns
// member-00 with SIGSTOP until the other has taken its members over, then
// continues it. No member is acted on by both at once: the paused replica
// dispatches no reconcile of a member after it woke until a handoff gives
// the member back, and a reconcile in flight when it was paused sends no
// write after it woke, so it acted only until the pause.
func TestPausedReplica(t *testing.T) {
	t.Parallel()
	suite.Need(t)
	ctx := t.Context()
	ns, objects := suite.Name("paused"), suite.Name("paced")
	fleettest.CreateNamespace(t, suite.HubClient, ns)
	for _, c := range suite.MemberClients {
		fleettest.CreateNamespace(t, c, objects)
	}
	var members []string
	for i := range 12 {
		name := fmt.Sprintf("member-%02d", i)
		members = append(members, name)
		server := i % len(suite.Kubeconfigs)
		if err := suite.MemberClients[server].Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: objects, Name: "paced-" + name}}); err != nil {
			t.Fatal(err)
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{registry.KubeconfigLabel: "true"}},
			Data:       map[string][]byte{registry.KubeconfigKey: suite.Kubeconfigs[server]},
		}
		if err := suite.HubClient.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(t.TempDir(), "hub.kubeconfig")
	if err := os.WriteFile(kubeconfig, suite.AdminKubeconfig(t, suite.Hub, "paused-replicas"), 0o600); err != nil {
		t.Fatal(err)
	}
	children := map[string]*child{}
	for _, name := range []string{"replica-a", "replica-b"} {
		children[name] = startChild(t, childReplica{Name: name, Namespace: ns, Kubeconfig: kubeconfig, Record: filepath.Join(t.TempDir(), name+".jsonl"), Objects: objects})
	}
	all := func() []interval {
		var out []interval
		for _, c := range children {
			out = append(out, c.intervals(t)...)
		}
		return out
	}
	// reconciledSince reports whether replica wrote to member in a
	// reconcile that started after since.
	reconciledSince := func(member, replica string, since time.Time) bool {
		return slices.ContainsFunc(all(), func(x interval) bool {
			return x.Member == member && x.Replica == replica && x.Start.After(since) && len(x.Writes) > 0
		})
	}
	owner := func(member string) string {
		var last interval
		for _, x := range all() {
			if x.Member == member && len(x.Writes) > 0 && x.Start.After(last.Start) {
				last = x
			}
		}
		return last.Replica
	}
	settle := time.Now()
	poll.Until(t, "every member reconciled since, both replicas owning some", func() bool {
		owners := map[string]bool{}
		for _, m := range members {
			if !slices.ContainsFunc(all(), func(x interval) bool { return x.Member == m && x.Start.After(settle) && len(x.Writes) > 0 }) {
				return false
			}
			owners[owner(m)] = true
		}
		return len(owners) == 2
	})
	pausedName := owner(members[0])
	paused := children[pausedName]
	otherName := map[string]string{"replica-a": "replica-b", "replica-b": "replica-a"}[pausedName]
	var pausedMembers []string
	for _, m := range members {
		if owner(m) == pausedName {
			pausedMembers = append(pausedMembers, m)
		}
	}

	if err := paused.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for _, m := range pausedMembers {
		poll.Until(t, m+" reconciled by "+otherName+" after "+pausedName+" was stopped", func() bool {
			return reconciledSince(m, otherName, stopped)
		})
	}
	t.Logf("%s stopped; %s reconciled its members %v after %s", pausedName, otherName, pausedMembers, time.Since(stopped))
	continued := time.Now()
	if err := paused.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// It fences, and gets its members back through a handoff.
	poll.Until(t, pausedName+" reconciles again", func() bool {
		return slices.ContainsFunc(pausedMembers, func(m string) bool { return reconciledSince(m, pausedName, continued) })
	})
	for _, c := range children {
		c.stop(t)
	}

	// A reconcile of the paused replica in flight at the pause acted only
	// until it, unless it wrote after it woke.
	runs := all()
	inFlight, refused := 0, 0
	for i, x := range runs {
		if x.Replica != pausedName || !x.Start.Before(stopped) || !x.End.After(stopped) {
			continue
		}
		inFlight++
		if !slices.ContainsFunc(x.Writes, func(w time.Time) bool { return w.After(stopped) }) {
			runs[i].End = stopped
			refused++
		}
	}
	t.Logf("%d reconciles of %s in flight at the pause, %d of them sent nothing after it", inFlight, pausedName, refused)
	var overlaps []string
	for i, a := range runs {
		for _, b := range runs[i+1:] {
			if a.Member == b.Member && a.Replica != b.Replica && a.Start.Before(b.End) && b.Start.Before(a.End) {
				overlaps = append(overlaps, fmt.Sprintf("%s: %s %s–%s and %s %s–%s (paused %s, continued %s)", a.Member,
					a.Replica, a.Start.Format(time.StampMicro), a.End.Format(time.StampMicro),
					b.Replica, b.Start.Format(time.StampMicro), b.End.Format(time.StampMicro),
					stopped.Format(time.StampMicro), continued.Format(time.StampMicro)))
			}
		}
	}
	if len(overlaps) > 0 {
		t.Errorf("members acted on by two replicas at once:\n%s", strings.Join(overlaps, "\n"))
	}
}
