package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/cli"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// The kinds whose rollouts the rollout commands manage.
const (
	propagationKind        = "Propagation"
	clusterPropagationKind = "ClusterPropagation"
)

// pollEvery is how often the commands that wait read the hub again.
const pollEvery = time.Second

// errNoRevisionCRD: the hub serves no PropagationRevisions.
var errNoRevisionCRD = errors.New("the hub has no PropagationRevision CRD: apply deploy/crd (kubectl apply -k deploy/)")

// newRolloutCommand returns "rollout", whose subcommands manage the
// rollout of a Propagation's revisions as kubectl rollout does a
// Deployment's.
func newRolloutCommand(hub *hubFlags) *cobra.Command {
	return rolloutCommand(hub, clock.RealClock{})
}

// rolloutCommand is newRolloutCommand with the clock that ages are
// measured by.
func rolloutCommand(hub *hubFlags, clk clock.PassiveClock) *cobra.Command {
	rollout := &cobra.Command{
		Use:   "rollout",
		Short: "Manage the rollout of a Propagation's or ClusterPropagation's revisions, as kubectl rollout does",
		Long: `Manage the rollout of a Propagation's or ClusterPropagation's revisions, as
kubectl rollout does a Deployment's. TYPE is propagation (prop) or
clusterpropagation (clusterprop); a Propagation is of the namespace -n names.`,
		Example: `  fleet-manager rollout status propagation/web -n team-a
  fleet-manager rollout pause prop/web -n team-a
  fleet-manager rollout undo clusterpropagation/baseline
  fleet-manager rollout history prop web -n team-a`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("%s wants a subcommand: status, pause, resume, undo, unpin or history", cmd.CommandPath())
		},
	}
	rollout.AddCommand(rolloutStatusCommand(hub), rolloutPauseCommand(hub, true), rolloutPauseCommand(hub, false), rolloutUndoCommand(hub), rolloutUnpinCommand(hub), rolloutHistoryCommand(hub, clk))
	return rollout
}

// rolloutTarget is the Propagation or ClusterPropagation a rollout
// command names.
type rolloutTarget struct {
	kind string
	key  client.ObjectKey
}

// bindRolloutTarget makes cmd take TYPE/NAME or TYPE NAME, completes
// them, and binds -n, the namespace of a Propagation, to ns.
func bindRolloutTarget(cmd *cobra.Command, hub *hubFlags, ns *namespaceFlags) {
	cmd.Args = rolloutArgs
	cmd.ValidArgsFunction = completeRolloutTarget(hub, &ns.namespace)
	ns.bindFlags(cmd, hub, false)
}

// rolloutArgs wants TYPE/NAME or TYPE NAME.
func rolloutArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 || len(args) > 2 {
		return usageErrorf("%s wants TYPE/NAME or TYPE NAME, got %d arguments", cmd.CommandPath(), len(args))
	}
	return nil
}

// parseRolloutTarget is the rollout args name: TYPE/NAME or TYPE NAME. A
// Propagation is of namespace ns, else of the hub kubeconfig's.
func parseRolloutTarget(hub *hubFlags, ns string, args []string) (rolloutTarget, error) {
	typ, name, slash := strings.Cut(args[0], "/")
	switch {
	case len(args) == 2 && slash:
		return rolloutTarget{}, usageErrorf("give TYPE/NAME or TYPE NAME, not both")
	case len(args) == 2:
		typ, name = args[0], args[1]
	case !slash:
		return rolloutTarget{}, usageErrorf("%q is not TYPE/NAME", args[0])
	}
	if name == "" {
		return rolloutTarget{}, usageErrorf("%q names no Propagation", strings.Join(args, " "))
	}
	switch rolloutKind(typ) {
	case propagationKind:
		namespace, err := hubNamespace(hub, ns)
		return rolloutTarget{kind: propagationKind, key: client.ObjectKey{Namespace: namespace, Name: name}}, err
	case clusterPropagationKind:
		return rolloutTarget{kind: clusterPropagationKind, key: client.ObjectKey{Name: name}}, nil
	}
	return rolloutTarget{}, usageErrorf("TYPE %q is neither propagation (prop) nor clusterpropagation (clusterprop)", typ)
}

// rolloutKind is the kind typ names, as kubectl names resources (with or
// without the group), or "".
func rolloutKind(typ string) string {
	switch strings.TrimSuffix(strings.ToLower(typ), "."+fleetv1alpha1.GroupVersion.Group) {
	case "propagation", "propagations", "prop":
		return propagationKind
	case "clusterpropagation", "clusterpropagations", "clusterprop":
		return clusterPropagationKind
	}
	return ""
}

// String is t as kubectl names it in its messages:
// propagation.fleet.fleetkube.io/web.
func (t rolloutTarget) String() string {
	return strings.ToLower(t.kind) + "." + fleetv1alpha1.GroupVersion.Group + "/" + t.key.Name
}

// get reads t, as the Propagation of no namespace a ClusterPropagation is
// to the manager.
func (t rolloutTarget) get(ctx context.Context, c client.Client) (*fleetv1alpha1.Propagation, error) {
	if t.kind == clusterPropagationKind {
		var cp fleetv1alpha1.ClusterPropagation
		if err := c.Get(ctx, t.key, &cp); err != nil {
			return nil, propagationReadError(err)
		}
		prop := asPropagation(&cp)
		return &prop, nil
	}
	var prop fleetv1alpha1.Propagation
	return &prop, propagationReadError(c.Get(ctx, t.key, &prop))
}

// patchSpec merge-patches t's spec with spec; a nil value removes its
// field.
func (t rolloutTarget) patchSpec(ctx context.Context, c client.Client, spec map[string]any) error {
	patch, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return err
	}
	var obj client.Object = &fleetv1alpha1.Propagation{}
	if t.kind == clusterPropagationKind {
		obj = &fleetv1alpha1.ClusterPropagation{}
	}
	obj.SetNamespace(t.key.Namespace)
	obj.SetName(t.key.Name)
	return propagationReadError(c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)))
}

// revisions lists t's PropagationRevisions by number: a Propagation's
// are in its namespace, a ClusterPropagation's in fleetNamespace.
func (t rolloutTarget) revisions(ctx context.Context, c client.Client, fleetNamespace string) ([]fleetv1alpha1.PropagationRevision, error) {
	namespace := cmp.Or(t.key.Namespace, fleetNamespace)
	var list fleetv1alpha1.PropagationRevisionList
	err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{
		fleetv1alpha1.PropagationLabel: t.key.Name,
		fleetv1alpha1.RevisionOfLabel:  t.kind,
	})
	if meta.IsNoMatchError(err) {
		return nil, errNoRevisionCRD
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b fleetv1alpha1.PropagationRevision) int { return cmp.Compare(a.Revision, b.Revision) })
	return list.Items, nil
}

// bindFleetNamespace binds --fleet-namespace, where a ClusterPropagation's
// revisions are.
func bindFleetNamespace(cmd *cobra.Command, hub *hubFlags, namespace *string) {
	cmd.Flags().StringVar(namespace, "fleet-namespace", fleet.DefaultNamespace, "The fleet namespace on the hub, where a ClusterPropagation's revisions are.")
	_ = cmd.RegisterFlagCompletionFunc("fleet-namespace", completeNamespaces(hub))
}

// Exit codes of rollout status, beside cli.ExitOK (rolled out),
// cli.ExitError (the hub could not be read) and cli.ExitUsage.
const (
	// exitRolloutFailed: the rollout stopped or failed, no member takes
	// it, or an entry of resources selects nothing.
	exitRolloutFailed = 3
	// exitRolloutTimedOut: --timeout passed, or, with --watch=false, the
	// rollout is not done yet.
	exitRolloutTimedOut = 4
	// exitRolloutHeld: spec.revision pins a revision older than the
	// newest, or the rollout is paused (once --timeout passes, or with
	// --watch=false).
	exitRolloutHeld = 5
	// exitRolloutNotFound: no such Propagation, or no Propagation CRD.
	exitRolloutNotFound = 6
)

// rolloutStatusCommand returns "rollout status".
func rolloutStatusCommand(hub *hubFlags) *cobra.Command {
	var (
		ns      namespaceFlags
		watch   bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status (TYPE NAME | TYPE/NAME)",
		Short: "Wait until a revision is rolled out, printing its progress",
		Long: `Wait until the rollout of a Propagation's revision is complete, printing a line
each time its progress changes. The revision is the one spec.revision pins,
else the newest. A paused rollout is waited for, as kubectl waits for a paused
Deployment. With --watch=false, it prints where the rollout stands once.

Exit codes:
  0  rolled out: the manager observed the Propagation's generation, every
     selected member runs the revision, and the manager reports, for that
     generation, that every entry of resources selects a hub object
  1  the hub could not be read
  2  usage error
  3  failed: the rollout stopped, or ended with failed members, no member
     takes it, the hub refused a revision of what it selects
     (RevisionRefused), or an entry of resources has selected nothing for
     30s, or until --timeout if sooner (the members, the entry and the
     reasons are named)
  4  timed out (or, with --watch=false, not rolled out yet), naming the
     members that hold the rollout and why, or that the manager reports no
     selection for the generation (an older manager: upgrade it)
  5  held: spec.revision pins a revision older than the newest (see
     "rollout unpin"), or the rollout is paused when the wait ends
  6  not found: no such Propagation, or no Propagation CRD`,
		Example: `  fleet-manager rollout status propagation/web -n team-a
  fleet-manager rollout status clusterprop/baseline --timeout=10m
  fleet-manager rollout status prop web -n team-a --watch=false`,
	}
	bindRolloutTarget(cmd, hub, &ns)
	cmd.Flags().BoolVarP(&watch, "watch", "w", true, "Wait until the rollout is complete. With --watch=false, print where it stands once.")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "How long to wait before giving up, such as 10m; 0 waits for ever.")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if timeout < 0 {
			return usageErrorf("--timeout must not be negative")
		}
		t, c, err := rolloutTargetClient(hub, ns.namespace, args)
		if err != nil {
			return err
		}
		var last rolloutStand
		deadline := time.Now().Add(timeout)
		check := func(ctx context.Context) (string, bool, error) {
			prop, err := t.get(ctx, c)
			if err != nil {
				return "", false, err
			}
			grace := selectionGrace
			if timeout > 0 {
				grace = min(grace, time.Until(deadline))
			}
			last = rolloutProgress(t, prop, time.Now(), grace)
			return last.line, last.verdict != verdictWaiting, nil
		}
		if watch {
			err = waitUntil(cmd.Context(), cmd.OutOrStdout(), timeout, "the rollout of "+t.String(), check)
		} else if _, _, err = check(cmd.Context()); err == nil {
			fmt.Fprintln(cmd.OutOrStdout(), last.line)
		}
		return rolloutStatusExit(cmd, last, err)
	}
	return cmd
}

// rolloutStatusExit is what rollout status returns once its wait ended
// with stand last, or err: an error that the root prints, or one that
// carries the exit code of the outcome, its message printed here.
func rolloutStatusExit(cmd *cobra.Command, last rolloutStand, err error) error {
	code, message := cli.ExitOK, ""
	var timedOut *timeoutError
	switch {
	case apierrors.IsNotFound(err) || errors.Is(err, errNoPropagationCRD):
		code, message = exitRolloutNotFound, err.Error()
	case errors.As(err, &timedOut) && last.unselected != "":
		// The timeout ends the grace period of an entry that selects
		// nothing: a failure, not a timeout.
		code, message = exitRolloutFailed, last.unselected
	case errors.As(err, &timedOut) && last.paused:
		code, message = exitRolloutHeld, timedOut.Error()+": the rollout is paused (fleet-manager rollout resume)"
	case errors.As(err, &timedOut):
		code, message = exitRolloutTimedOut, timedOut.Error()
		if last.holders != "" {
			message += "; held by " + last.holders
		}
		if last.unreported != "" {
			message += "; " + last.unreported
		}
	case err != nil:
		return err
	case last.verdict == verdictFailed:
		code, message = exitRolloutFailed, last.why
	case last.verdict == verdictHeld:
		code, message = exitRolloutHeld, last.why
	case last.verdict == verdictWaiting && last.paused:
		code = exitRolloutHeld
	case last.verdict == verdictWaiting:
		code = exitRolloutTimedOut
	}
	if code == cli.ExitOK {
		return nil
	}
	if message != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s\n", cmd.CommandPath(), message)
	}
	return &exitCodeError{code: code}
}

// wantedRevision is the revision prop's rollout is to reach: the one
// spec.revision pins, else the newest; 0 before the first.
func wantedRevision(prop *fleetv1alpha1.Propagation) int64 {
	if prop.Spec.Revision != nil {
		return *prop.Spec.Revision
	}
	return prop.Status.Revision
}

// rolloutVerdict is what rollout status makes of a rollout.
type rolloutVerdict int

const (
	verdictWaiting rolloutVerdict = iota
	verdictRolledOut
	verdictFailed
	verdictHeld
)

// rolloutStand is where a rollout stands, for rollout status: the line
// to print, the verdict, why it failed or is held, whether it is paused,
// the members that hold it, with their reasons, an entry of resources
// that selects nothing, within its grace period, and that the manager
// reports no selection of the generation.
type rolloutStand struct {
	line       string
	verdict    rolloutVerdict
	why        string
	paused     bool
	holders    string
	unselected string
	unreported string
}

// selectionGrace is how long rollout status waits, by the condition's
// lastTransitionTime, for an entry of resources that selects nothing to
// select something before it fails: a typo fails, an object created just
// after its Propagation does not.
const selectionGrace = 30 * time.Second

// rolloutProgress says where prop's rollout, t's, stands. Complete is not
// taken at its word: a rollout to no member, one whose pin holds back a
// newer revision, or one with an entry of resources that selects nothing
// is no rollout a gate may pass.
//
// Rolled out needs evidence: a ResourcesSelected True of the observed
// generation. A False one fails once it is older than grace, at now.
func rolloutProgress(t rolloutTarget, prop *fleetv1alpha1.Propagation, now time.Time, grace time.Duration) rolloutStand {
	st := prop.Status
	wanted := wantedRevision(prop)
	r := st.Rollout
	stand := rolloutStand{holders: rolloutHolders(st)}
	waiting := func(line string) rolloutStand {
		stand.line = line
		return stand
	}
	switch {
	case st.ObservedGeneration != prop.Generation:
		return waiting(fmt.Sprintf("Waiting for the manager to observe generation %d", prop.Generation))
	case wanted == 0:
		return waiting("Waiting for the first revision")
	case r == nil || r.Revision != wanted:
		return waiting(fmt.Sprintf("Waiting for rollout of revision %d to start", wanted))
	case r.Phase == fleetv1alpha1.RolloutStopped:
		stand.verdict, stand.why = verdictFailed, fmt.Sprintf("rollout of revision %d stopped: %s", wanted, oneLine(r.Message))
		return stand
	case r.Phase == fleetv1alpha1.RolloutFailed:
		stand.verdict, stand.why = verdictFailed, fmt.Sprintf("rollout of revision %d failed: %s", wanted, oneLine(r.Message))
		return stand
	case r.Reason == fleetv1alpha1.ReasonNoMembersSelected || r.Phase == fleetv1alpha1.RolloutComplete && r.Updated == 0:
		stand.verdict, stand.why = verdictFailed, fmt.Sprintf("revision %d is rolled out to no member: %s", wanted, orNone(oneLine(r.Message)))
		return stand
	case r.Phase != fleetv1alpha1.RolloutComplete && r.Phase != fleetv1alpha1.RolloutPinned:
		line := fmt.Sprintf("Waiting for rollout of revision %d: %d of %d members updated", wanted, r.Updated, st.Selected)
		if r.Phase == fleetv1alpha1.RolloutPaused {
			stand.paused = true
			line += "; the rollout is paused"
		} else if r.Message != "" {
			line += " (" + oneLine(r.Message) + ")"
		}
		return waiting(line)
	}
	rolledOutLine := fmt.Sprintf("revision %d rolled out to %s", wanted, plural(int(r.Updated), "member"))
	c := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.PropagationResourcesSelected)
	switch {
	case c == nil || c.ObservedGeneration != st.ObservedGeneration || c.Status == metav1.ConditionUnknown:
		stand.unreported = fmt.Sprintf("the manager reports no selection (ResourcesSelected) for generation %d: upgrade the manager if it is older than this command", prop.Generation)
		return waiting(fmt.Sprintf("Waiting for the manager to report what generation %d selects (ResourcesSelected)", prop.Generation))
	case c.Status == metav1.ConditionFalse:
		why := fmt.Sprintf("revision %d selects less than spec.resources names: %s (%s)", wanted, oneLine(c.Message), c.Reason)
		if since := now.Sub(c.LastTransitionTime.Time); since < grace {
			stand.unselected = why
			return waiting(fmt.Sprintf("Waiting for every entry of resources to select a hub object (%s, %s); failing after %s", c.Reason, oneLine(c.Message), grace.Round(time.Second)))
		}
		stand.line, stand.verdict, stand.why = rolledOutLine, verdictFailed, why
		return stand
	}
	stand.line = rolledOutLine
	if prop.Spec.Revision != nil && (r.Phase == fleetv1alpha1.RolloutPinned || st.Revision > wanted) {
		unpin := "fleet-manager rollout unpin " + strings.ToLower(t.kind) + "/" + t.key.Name
		if t.key.Namespace != "" {
			unpin += " -n " + t.key.Namespace
		}
		stand.verdict = verdictHeld
		stand.why = fmt.Sprintf("spec.revision pins revision %d: the newest, revision %d, is not rolled out (%s)", wanted, st.Revision, unpin)
		return stand
	}
	stand.verdict = verdictRolledOut
	return stand
}

// rolloutHolders names the members st lists as not applied and
// available, with their reasons: "member-b: MemberUnhealthy".
func rolloutHolders(st fleetv1alpha1.PropagationStatus) string {
	const most = 5
	var names []string
	for i, m := range st.Members {
		if i == most {
			names = append(names, fmt.Sprintf("and %d more", len(st.Members)-most))
			break
		}
		names = append(names, m.Name+": "+cmp.Or(m.Reason, string(m.Result)))
	}
	return strings.Join(names, ", ")
}

// plural is n and noun, made plural unless n is 1: "1 member", "2 members".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// timeoutError says that a wait's timeout passed.
type timeoutError struct {
	after time.Duration
	what  string
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("timed out after %s waiting for %s", e.after, e.what)
}

// waitUntil calls check every pollEvery, and writes to w each line it
// returns that differs from the one before, until check reports done or
// fails, ctx ends, or timeout passes (0: never): then it returns a
// *timeoutError, what naming what was waited for. check's context
// carries no deadline of the timeout, only its cancellation: a client's
// rate limiter, which fails at once a wait that would pass a deadline,
// never reports the timeout in its own words.
func waitUntil(ctx context.Context, w io.Writer, timeout time.Duration, what string, check func(context.Context) (line string, done bool, err error)) error {
	waitCtx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	checkCtx, cancelCheck := context.WithCancel(ctx)
	defer cancelCheck()
	defer context.AfterFunc(waitCtx, cancelCheck)()
	shown := ""
	// One read is made whatever the timeout: what is read is judged
	// before the timeout is (a Propagation that is not there is not a
	// timeout).
	line, done, err := check(ctx)
	if err != nil {
		return err
	}
	if line != "" {
		shown = line
		fmt.Fprintln(w, line)
	}
	if done {
		return nil
	}
	err = wait.PollUntilContextCancel(waitCtx, pollEvery, false, func(context.Context) (bool, error) {
		line, done, err := check(checkCtx)
		if err != nil {
			return false, err
		}
		if line != shown {
			shown = line
			fmt.Fprintln(w, line)
		}
		return done, nil
	})
	if err != nil && ctx.Err() == nil && waitCtx.Err() != nil {
		return &timeoutError{after: timeout, what: what}
	}
	return err
}

// rolloutPauseCommand returns "rollout pause", or with pause false
// "rollout resume".
func rolloutPauseCommand(hub *hubFlags, pause bool) *cobra.Command {
	var ns namespaceFlags
	cmd := &cobra.Command{
		Use:   "pause (TYPE NAME | TYPE/NAME)",
		Short: "Pause a rollout: no member is given another revision until it is resumed",
		Long: `Pause the rollout of a Propagation: set spec.paused, and no member is given
another revision until "fleet-manager rollout resume" removes it. Members keep
the revision they have, and its copies are kept as it says, drift included.`,
		Example: `  fleet-manager rollout pause propagation/web -n team-a`,
	}
	done := "paused"
	if !pause {
		cmd.Use = "resume (TYPE NAME | TYPE/NAME)"
		cmd.Short = "Resume a paused rollout"
		cmd.Long = `Resume the paused rollout of a Propagation: remove spec.paused, and the members
are given the revision the rollout is of, as its strategy says.`
		cmd.Example = `  fleet-manager rollout resume propagation/web -n team-a`
		done = "resumed"
	}
	bindRolloutTarget(cmd, hub, &ns)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		t, c, err := rolloutTargetClient(hub, ns.namespace, args)
		if err != nil {
			return err
		}
		prop, err := t.get(cmd.Context(), c)
		if err != nil {
			return err
		}
		if prop.Spec.Paused == pause {
			fmt.Fprintf(cmd.OutOrStdout(), "%s already %s\n", t, done)
			return nil
		}
		paused := any(nil)
		if pause {
			paused = true
		}
		if err := t.patchSpec(cmd.Context(), c, map[string]any{"paused": paused}); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", t, done)
		return nil
	}
	return cmd
}

// rolloutUndoCommand returns "rollout undo".
func rolloutUndoCommand(hub *hubFlags) *cobra.Command {
	var (
		ns             namespaceFlags
		toRevision     int64
		fleetNamespace string
	)
	cmd := &cobra.Command{
		Use:   "undo (TYPE NAME | TYPE/NAME)",
		Short: "Roll back to an earlier revision, by pinning it in spec.revision",
		Long: `Roll a Propagation back to an earlier revision: set spec.revision to it, and it
rolls out with the Propagation's strategy. Without --to-revision, the revision
is the newest kept before the one being rolled out. A revision that is not
kept is refused, naming those that are. A paused rollout stays paused: it
rolls back once resumed.

The pin holds until "fleet-manager rollout unpin" removes it; then the newest
revision rolls out again. While it holds a newer revision back, the rollout is
Pinned, not Complete, and rollout status exits 5. Pinning the newest revision
is not the same: a later change would not roll out.`,
		Example: `  fleet-manager rollout undo propagation/web -n team-a
  fleet-manager rollout undo propagation/web -n team-a --to-revision=3
  fleet-manager rollout undo clusterprop/baseline --fleet-namespace=fleet-system`,
	}
	bindRolloutTarget(cmd, hub, &ns)
	cmd.Flags().Int64Var(&toRevision, "to-revision", 0, "The revision to roll back to; 0, as in kubectl, is the one before the revision being rolled out.")
	bindFleetNamespace(cmd, hub, &fleetNamespace)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if toRevision < 0 {
			return usageErrorf("--to-revision must not be negative")
		}
		t, c, prop, revs, err := readRevisions(cmd.Context(), hub, ns.namespace, fleetNamespace, args)
		if err != nil {
			return err
		}
		revision, err := undoRevision(t, prop, revs, toRevision)
		if err != nil {
			return err
		}
		if err := t.patchSpec(cmd.Context(), c, map[string]any{"revision": revision}); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s rolled back to revision %d\n", t, revision)
		return nil
	}
	return cmd
}

// rolloutUnpinCommand returns "rollout unpin".
func rolloutUnpinCommand(hub *hubFlags) *cobra.Command {
	var ns namespaceFlags
	cmd := &cobra.Command{
		Use:   "unpin (TYPE NAME | TYPE/NAME)",
		Short: "Remove the pin undo set: the newest revision rolls out again",
		Long: `Remove spec.revision, the pin "fleet-manager rollout undo" sets: the newest
revision rolls out again, with the Propagation's strategy. A paused rollout
stays paused.`,
		Example: `  fleet-manager rollout unpin propagation/web -n team-a`,
	}
	bindRolloutTarget(cmd, hub, &ns)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		t, c, err := rolloutTargetClient(hub, ns.namespace, args)
		if err != nil {
			return err
		}
		prop, err := t.get(cmd.Context(), c)
		if err != nil {
			return err
		}
		if prop.Spec.Revision == nil {
			fmt.Fprintf(cmd.OutOrStdout(), "%s not pinned\n", t)
			return nil
		}
		if err := t.patchSpec(cmd.Context(), c, map[string]any{"revision": nil}); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s unpinned from revision %d: the newest rolls out\n", t, *prop.Spec.Revision)
		return nil
	}
	return cmd
}

// rolloutTargetClient returns the rollout target args name, and a client
// of the hub to read it with.
func rolloutTargetClient(hub *hubFlags, namespace string, args []string) (rolloutTarget, client.Client, error) {
	t, err := parseRolloutTarget(hub, namespace, args)
	if err != nil {
		return t, nil, err
	}
	c, err := hub.client()
	return t, c, err
}

// readRevisions reads the rollout target args name, with the hub client
// it is read with, and its revisions kept, sorted.
func readRevisions(ctx context.Context, hub *hubFlags, namespace, fleetNamespace string, args []string) (rolloutTarget, client.Client, *fleetv1alpha1.Propagation, []fleetv1alpha1.PropagationRevision, error) {
	t, c, err := rolloutTargetClient(hub, namespace, args)
	if err != nil {
		return t, nil, nil, nil, err
	}
	prop, err := t.get(ctx, c)
	if err != nil {
		return t, c, nil, nil, err
	}
	revs, err := t.revisions(ctx, c, fleetNamespace)
	return t, c, prop, revs, err
}

// undoRevision is the revision of revs (sorted) undo rolls t back to:
// toRevision if it is kept, else, with toRevision 0, the newest before
// the one being rolled out.
func undoRevision(t rolloutTarget, prop *fleetv1alpha1.Propagation, revs []fleetv1alpha1.PropagationRevision, toRevision int64) (int64, error) {
	numbers := make([]string, len(revs))
	for i, r := range revs {
		numbers[i] = strconv.FormatInt(r.Revision, 10)
	}
	kept := "revisions kept: " + orNone(strings.Join(numbers, ", "))
	if toRevision > 0 {
		if !slices.ContainsFunc(revs, func(r fleetv1alpha1.PropagationRevision) bool { return r.Revision == toRevision }) {
			return 0, fmt.Errorf("%s has no revision %d (%s)", t, toRevision, kept)
		}
		return toRevision, nil
	}
	r := prop.Status.Rollout
	if r == nil || r.Revision == 0 {
		return 0, fmt.Errorf("%s has no rollout to undo yet: name a revision with --to-revision (%s)", t, kept)
	}
	for _, rev := range slices.Backward(revs) {
		if rev.Revision < r.Revision {
			return rev.Revision, nil
		}
	}
	return 0, fmt.Errorf("%s has no revision before %d to roll back to (%s)", t, r.Revision, kept)
}

// rolloutHistoryCommand returns "rollout history".
func rolloutHistoryCommand(hub *hubFlags, clk clock.PassiveClock) *cobra.Command {
	var (
		ns             namespaceFlags
		fleetNamespace string
	)
	cmd := &cobra.Command{
		Use:   "history (TYPE NAME | TYPE/NAME)",
		Short: "List the revisions kept, how many members each is given, and the one being rolled out",
		Long: `List a Propagation's revisions kept (its PropagationRevisions), with how many
members each is given and, in CURRENT, a * on the revision being rolled out.`,
		Example: `  fleet-manager rollout history propagation/web -n team-a
  fleet-manager rollout history clusterprop/baseline --fleet-namespace=fleet-system`,
	}
	bindRolloutTarget(cmd, hub, &ns)
	bindFleetNamespace(cmd, hub, &fleetNamespace)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		t, _, prop, revs, err := readRevisions(cmd.Context(), hub, ns.namespace, fleetNamespace, args)
		if err != nil {
			return err
		}
		if len(revs) == 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "No revisions of %s found.\n", t)
			return nil
		}
		fmt.Fprintln(cmd.OutOrStdout(), t)
		return printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(historyTable(prop, revs, clk.Now()), cmd.OutOrStdout())
	}
	return cmd
}

// historyTable is the table of rollout history: revs with their age at
// now, how many of prop's members each is given, and which is current.
func historyTable(prop *fleetv1alpha1.Propagation, revs []fleetv1alpha1.PropagationRevision, now time.Time) *metav1.Table {
	given := map[int64]int{}
	var current int64
	if r := prop.Status.Rollout; r != nil {
		current = r.Revision
		for _, m := range r.Members {
			given[m.Revision] += len(m.Names)
		}
	}
	table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Revision", Type: "integer"},
		{Name: "Age", Type: "string"},
		{Name: "Members", Type: "integer", Description: "Members given the revision"},
		{Name: "Current", Type: "string", Description: "The revision being rolled out"},
	}}
	for i := range revs {
		r := &revs[i]
		marker := ""
		if r.Revision == current {
			marker = "*"
		}
		table.Rows = append(table.Rows, tableRow(r, r.Revision, age(&r.CreationTimestamp, now), int64(given[r.Revision]), marker))
	}
	return table
}

// completeRolloutTarget completes a rollout command's TYPE/NAME, or TYPE
// then NAME, as kubectl completes kubectl rollout's.
func completeRolloutTarget(hub *hubFlags, ns *string) cobra.CompletionFunc {
	names := map[string]cobra.CompletionFunc{
		propagationKind:        completePropagations(hub, ns),
		clusterPropagationKind: completeClusterPropagations(hub),
	}
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		switch {
		case len(args) == 1 && !strings.Contains(args[0], "/") && rolloutKind(args[0]) != "":
			return names[rolloutKind(args[0])](cmd, nil, toComplete)
		case len(args) > 0:
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		typ, name, slash := strings.Cut(toComplete, "/")
		if !slash {
			var types []string
			for _, t := range []string{"clusterpropagation", "propagation"} {
				if strings.HasPrefix(t, toComplete) {
					types = append(types, t)
				}
			}
			return types, cobra.ShellCompDirectiveNoFileComp
		}
		kind := rolloutKind(typ)
		if kind == "" {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		matching, directive := names[kind](cmd, nil, name)
		for i, n := range matching {
			matching[i] = typ + "/" + n
		}
		return matching, directive
	}
}
