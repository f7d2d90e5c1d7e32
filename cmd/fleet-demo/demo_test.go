package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetkube/fleet-manager/internal/syncbuffer"
)

// runDemoEnv makes the test binary run the demo instead of the tests, so
// that a test runs the demo as a process of its own without building it.
const runDemoEnv = "FLEET_DEMO_TEST_RUN_DEMO"

func TestMain(m *testing.M) {
	if os.Getenv(runDemoEnv) == "1" {
		os.Exit(execute(os.Args[1:], os.Stderr))
	}
	logf.SetLogger(logr.Discard()) // the test's own clients log nothing worth reading
	os.Exit(m.Run())
}

// TestDemoAsANewcomer does what the demo tells a newcomer to try, then
// presses Ctrl-C: the kubeconfigs work, a ConfigMap created in a member is
// reconciled, a frozen member turns Unhealthy and comes back, and the demo
// exits 0, without one ERROR line and without leaving anything behind.
func TestDemoAsANewcomer(t *testing.T) {
	d := startDemo(t)
	d.await("press Ctrl-C to stop", time.Minute)
	out := d.stdout.String()

	kubeconfigs := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^  (hub|member-a|member-b) +(/\S+\.kubeconfig)`).FindAllStringSubmatch(out, -1) {
		kubeconfigs[m[1]] = m[2]
	}
	if len(kubeconfigs) != 3 {
		t.Fatalf("kubeconfigs printed: %v, want hub, member-a and member-b", kubeconfigs)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigs["member-a"])
	if err != nil {
		t.Fatal(err)
	}
	member, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var namespaces corev1.NamespaceList
	if err := member.List(t.Context(), &namespaces); err != nil {
		t.Fatalf("listing namespaces with member-a's printed kubeconfig: %v", err)
	}

	// The printed kubectl commands, as a person would paste them.
	listed := runPrinted(t, out, "get memberclusters")
	for _, name := range demoMembers {
		if !regexp.MustCompile(`(?m)^` + name + ` +Ready `).MatchString(listed) {
			t.Errorf("kubectl get memberclusters shows no Ready %s:\n%s", name, listed)
		}
	}
	// The Propagation walk-through, in order, before the fleet is up.
	last := -1
	for _, step := range []string{
		"propagated: ConfigMap demo/settings is in member-a and member-b",
		`overridden: the copy in member-a has member="member-a", the one in member-b member="member-b"`,
		`edited the copy in member-a: color="red"`,
		`corrected: the copy in member-a is color="blue" again`,
		`rolling out: member-a has color="green", member-b waits with "blue"`,
		"rolled out: revision",
		`rolled back: spec.revision pins revision`,
		"removed: no member holds a copy of demo/settings any more",
	} {
		i := strings.Index(out, step)
		if i < 0 || i < last {
			t.Fatalf("the demo did not print %q after the previous step:\n%s", step, out)
		}
		last = i
	}
	if props := runPrinted(t, out, "get propagations"); !regexp.MustCompile(`(?m)^settings +2 +`).MatchString(props) {
		t.Errorf("kubectl get propagations shows no Propagation settings selecting 2 members:\n%s", props)
	}
	runPrinted(t, out, "label configmap settings")
	d.await(`reconciled demo/settings in member-a: color="blue"`, 30*time.Second)
	// The printed edit, with an editor that changes the color.
	t.Setenv("KUBE_EDITOR", "sed -i s/blue/red/")
	if got := runPrinted(t, out, "edit configmap settings"); !strings.Contains(got, "edited") {
		t.Fatalf("kubectl edit changed nothing: %s", got)
	}
	copyInA := &corev1.ConfigMap{}
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := member.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: demoPropagation}, copyInA)
		return err == nil && copyInA.Data["color"] == "blue", nil
	}); err != nil {
		t.Fatalf("the edited copy in member-a was not set back to blue: %v (color=%q)", err, copyInA.Data["color"])
	}
	runPrinted(t, out, "create configmap try-me")
	d.await(`reconciled demo/try-me in member-a: greeting="hi"`, 30*time.Second)

	pidMatch := regexp.MustCompile(`kill -STOP (\d+) +# freeze member-a's`).FindStringSubmatch(out)
	if pidMatch == nil {
		t.Fatal("no kill -STOP command printed for member-a")
	}
	pid, _ := strconv.Atoi(pidMatch[1])
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	const unhealthy = "member member-a is Unhealthy (was Ready)"
	d.await(unhealthy, 30*time.Second)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Back from Unhealthy, or through Connecting if its connections
	// were lost while it was frozen.
	d.awaitAfter(unhealthy, "member member-a is Ready (was ", 30*time.Second)

	d.interruptCleanly()
	if _, err := os.Stat(filepath.Dir(kubeconfigs["hub"])); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the kubeconfig directory is still there after the demo: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("member-a's kube-apiserver (PID %d) outlived the demo: %v", pid, err)
	}
}

// runPrinted runs the printed command line that contains what, without
// its comment, and returns its output.
func runPrinted(t *testing.T, out, what string) string {
	t.Helper()
	for line := range strings.Lines(out) {
		line, _, _ = strings.Cut(line, "#")
		if args := strings.Fields(line); len(args) > 0 && strings.HasSuffix(args[0], "kubectl") && strings.Contains(line, what) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			got, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", strings.TrimSpace(line), err, got)
			}
			return string(got)
		}
	}
	t.Fatalf("no kubectl command with %q printed", what)
	return ""
}

// TestDemoCtrlCWhileStarting presses Ctrl-C as the fleet manager starts,
// while its informers are still syncing: the demo lets it finish starting,
// then exits 0 without one ERROR line.
func TestDemoCtrlCWhileStarting(t *testing.T) {
	d := startDemo(t)
	d.await("starting the fleet manager…", time.Minute)
	d.interruptCleanly()
}

// TestDemoCtrlCDuringPropagation presses Ctrl-C as the Propagation
// controller starts copying: the demo exits 0 without one ERROR line.
func TestDemoCtrlCDuringPropagation(t *testing.T) {
	d := startDemo(t)
	d.await("created ConfigMap demo/settings", 2*time.Minute)
	d.interruptCleanly()
}

// demoProcess is the demo running as a process of its own.
type demoProcess struct {
	t              *testing.T
	cmd            *exec.Cmd
	exited         chan error
	stdout, stderr syncbuffer.Buffer
}

// startDemo starts the demo; it is stopped when t ends, if still running.
func startDemo(t *testing.T) *demoProcess {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("needs KUBEBUILDER_ASSETS (run `make test`)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d := &demoProcess{t: t, cmd: exec.Command(self, "-timeout=1m"), exited: make(chan error, 1)}
	d.cmd.Env = append(os.Environ(), runDemoEnv+"=1")
	d.cmd.Stdout, d.cmd.Stderr = &d.stdout, &d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			// Ctrl-C first: a killed demo would leave its API servers running.
			_ = d.cmd.Process.Signal(os.Interrupt)
			select {
			case <-d.exited:
			case <-time.After(time.Minute):
				_ = d.cmd.Process.Kill()
				<-d.exited
			}
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", d.stdout.String(), d.stderr.String())
		}
	})
	return d
}

// await waits until the demo says want, failing the test if the demo
// exits or timeout passes first.
func (d *demoProcess) await(want string, timeout time.Duration) {
	d.t.Helper()
	d.awaitAfter("", want, timeout)
}

// awaitAfter waits until the demo says want after it said after.
func (d *demoProcess) awaitAfter(after, want string, timeout time.Duration) {
	d.t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	said := func() bool {
		out := d.stdout.String()
		i := strings.Index(out, after)
		return i >= 0 && strings.Contains(out[i+len(after):], want)
	}
	for !said() {
		select {
		case err := <-d.exited:
			d.t.Fatalf("the demo exited (%v) before saying %q", err, want)
		case <-deadline:
			d.t.Fatalf("the demo did not say %q within %s", want, timeout)
		case <-tick.C:
		}
	}
}

// interruptCleanly presses Ctrl-C and checks that the demo exits 0
// within a minute, without an ERROR line on stdout or stderr.
func (d *demoProcess) interruptCleanly() {
	d.t.Helper()
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		d.t.Fatal(err)
	}
	select {
	case err := <-d.exited:
		if err != nil {
			d.t.Errorf("after Ctrl-C the demo exited with %v, want exit code 0", err)
		}
	case <-time.After(time.Minute):
		d.t.Fatal("the demo did not exit within a minute of Ctrl-C")
	}
	for name, s := range map[string]string{"stdout": d.stdout.String(), "stderr": d.stderr.String()} {
		if strings.Contains(s, "ERROR") {
			d.t.Errorf("the demo's %s has an ERROR line", name)
		}
	}
}
