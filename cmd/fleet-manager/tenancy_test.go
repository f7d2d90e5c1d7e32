package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/cli"
	"github.com/fleetkube/fleet-manager/pkg/registry"
	"github.com/fleetkube/fleet-manager/pkg/tenancy"
)

// tenancyFleet is a fleet on the shared hub with three members (dev and
// prod registered in the fleet namespace, capi-dev from another source),
// a tenant namespace team-a whose policies let it reach its dev members
// with every kind but RBAC and prod with ConfigMaps only, and a namespace
// team-b no policy is for.
type tenancyFleet struct {
	c                  client.Client
	hub                string // the --hub-kubeconfig flag
	ns, teamA, teamB   string
	dev, prod, capiDev string
}

func newTenancyFleet(t *testing.T) *tenancyFleet {
	t.Helper()
	needAPIServers(t)
	c, hub := hubClient(t)
	f := &tenancyFleet{c: c, hub: hub}
	for _, name := range []*string{&f.ns, &f.teamA, &f.teamB} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenancy-"}}
		if err := c.Create(t.Context(), ns); err != nil {
			t.Fatal(err)
		}
		*name = ns.Name
	}
	f.dev, f.prod, f.capiDev = f.ns+"-dev", f.ns+"-prod", f.ns+"-capi-dev"
	for name, env := range map[string]string{f.dev: "dev", f.prod: "prod", f.capiDev: "dev"} {
		ref := fleetv1alpha1.SecretReference{Format: fleetv1alpha1.RegistrationFormat("native"), Namespace: f.ns, Name: name}
		if name == f.capiDev {
			ref = fleetv1alpha1.SecretReference{Format: fleetv1alpha1.RegistrationFormat("cluster-api"), Namespace: "capi", Name: name + "-kubeconfig"}
		}
		mc := newMember(name, f.ns, ref)
		mc.Labels["env"], mc.Labels[fleetv1alpha1.FleetLabel] = env, f.ns
		createMember(t, c, mc)
	}
	for _, p := range []*fleetv1alpha1.TenancyPolicy{{
		ObjectMeta: metav1.ObjectMeta{Name: f.teamA + "-dev"},
		Spec: fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{f.teamA}},
			Members:    fleetv1alpha1.ReachableMembers{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"env": "dev"}), Sources: []string{f.ns}},
			Kinds:      fleetv1alpha1.KindRules{Deny: []fleetv1alpha1.KindRule{{Group: "rbac.authorization.k8s.io", Kind: "*"}}},
		},
	}, {
		ObjectMeta: metav1.ObjectMeta{Name: f.teamA + "-prod-configs"},
		Spec: fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{f.teamA}},
			Members:    fleetv1alpha1.ReachableMembers{Names: []string{f.prod}},
			Kinds:      fleetv1alpha1.KindRules{Allow: []fleetv1alpha1.KindRule{{Kind: "ConfigMap"}}},
		},
	}} {
		if err := c.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(t.Context(), p) })
	}
	return f
}

// run runs args against the fleet's hub, as fleet-manager would.
func (f *tenancyFleet) run(t *testing.T, args ...string) cliResult {
	t.Helper()
	return runCLI(t, nil, clock.RealClock{}, append(args, f.hub, "--fleet-namespace="+f.ns)...)
}

// row is the line of out that starts with name.
func row(out, name string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strings.Join(strings.Fields(line), " ")
		}
	}
	return ""
}

// A fleet this version creates enforces tenancy: its identity says so,
// whoever creates it (the manager, or register, through registry.FleetID).
func TestANewFleetEnforcesTenancy(t *testing.T) {
	needAPIServers(t)
	c, _ := hubClient(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenancy-new-"}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.FleetID(t.Context(), c, c, ns.Name); err != nil {
		t.Fatal(err)
	}
	identity := &corev1.ConfigMap{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns.Name, Name: fleetv1alpha1.FleetIdentityName}, identity); err != nil {
		t.Fatal(err)
	}
	if mode, err := tenancy.Mode(fleetv1alpha1.TenancyAuto, identity); err != nil || mode != fleetv1alpha1.TenancyEnforce {
		t.Errorf("a new fleet's identity %v: Auto is %s (%v), want Enforce", identity.Data, mode, err)
	}
}

func TestGetMembersOfANamespace(t *testing.T) {
	f := newTenancyFleet(t)
	if _, err := registry.FleetID(t.Context(), f.c, f.c, f.ns); err != nil {
		t.Fatal(err)
	}
	res := f.run(t, "get", "members", "-n", f.teamA, "-o", "wide", "-l", getTestLabel+"="+f.ns)
	if res.code != cli.ExitOK || !strings.Contains(res.stderr, "Tenancy is Enforce (--tenancy=Auto, and fleet "+f.ns+" was created enforcing tenancy)") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	for name, want := range map[string]string{
		f.dev:     "Yes " + f.teamA + "-dev: every kind but *.rbac.authorization.k8s.io " + f.teamA + "-dev " + f.ns + " <none>",
		f.prod:    "Yes " + f.teamA + "-prod-configs: ConfigMap " + f.teamA + "-prod-configs " + f.ns + " <none>",
		f.capiDev: "No <none> <none> capi no TenancyPolicy for namespace " + f.teamA + " lets it reach member " + f.capiDev,
	} {
		if got := row(res.stdout, name); !strings.HasPrefix(got, name+" "+want) {
			t.Errorf("row %q, want it to start with %q", got, name+" "+want)
		}
	}

	res = f.run(t, "get", "members", "-n", f.teamB, "-l", getTestLabel+"="+f.ns)
	if !strings.Contains(res.stderr, "No TenancyPolicy is for namespace "+f.teamB+": it reaches no member.") || row(res.stdout, f.dev) != f.dev+" No <none> <none>" {
		t.Errorf("team-b, no policy: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	for _, args := range [][]string{{"--tenancy=enforce"}, {"--tenancy="}, {"-o", "yaml"}, {"--watch"}, {"-n", "Team_A"}} {
		if res := f.run(t, append([]string{"get", "members", "-n", f.teamA}, args...)...); res.code != cli.ExitUsage {
			t.Errorf("%q: exit %d, want %d; stderr:\n%s", args, res.code, cli.ExitUsage, res.stderr)
		}
	}
}

// An upgraded fleet, whose identity predates tenancy, is Off under Auto:
// every namespace reaches every member, and the command says so.
func TestGetMembersOfANamespaceOfAnOldFleet(t *testing.T) {
	f := newTenancyFleet(t)
	old := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: fleetv1alpha1.FleetIdentityName},
		Data:       map[string]string{fleetv1alpha1.FleetIdentityKey: "old-fleet"},
	}
	if err := f.c.Create(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	res := f.run(t, "get", "members", "-n", f.teamB, "-l", getTestLabel+"="+f.ns)
	if !strings.Contains(res.stderr, "Tenancy is Off (--tenancy=Auto, and fleet "+f.ns+" was created before tenancy") ||
		!strings.Contains(res.stderr, "reaches every member with every kind") || row(res.stdout, f.prod) != f.prod+" Yes every kind (tenancy Off) <none>" {
		t.Errorf("old fleet: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	res = f.run(t, "get", "members", "-n", f.teamA, "--tenancy=Enforce", "-l", getTestLabel+"="+f.ns)
	if !strings.Contains(res.stderr, "Tenancy is Enforce (--tenancy=Enforce)") || !strings.HasPrefix(row(res.stdout, f.capiDev), f.capiDev+" No") {
		t.Errorf("old fleet, --tenancy=Enforce: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
}

// The worst policy, a selector that does not parse, is refused by the
// hub; one stored all the same (by an older CRD) is shown as a doubt,
// never as reaching nothing.
func TestAPolicyThatDoesNotParseIsShownInDoubt(t *testing.T) {
	needAPIServers(t)
	c, _ := hubClient(t)
	bad := fleetv1alpha1.TenancyPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "tenancy-does-not-parse"},
		Spec: fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a"}},
			Members:    fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{MatchExpressions: []fleetv1alpha1.LabelSelectorRequirement{{Key: "env", Operator: "In"}}}},
		},
	}
	if err := c.Create(t.Context(), bad.DeepCopy()); !apierrors.IsInvalid(err) {
		t.Errorf("creating a policy whose selector does not parse: %v, want Invalid", err)
	}
	reach := tenancy.New([]fleetv1alpha1.TenancyPolicy{bad})
	mc := fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "dev-eu"}}
	table := reachTable(reach, fleetv1alpha1.TenancyEnforce, tenancy.Namespace{Name: "team-a"}, []fleetv1alpha1.MemberCluster{mc})
	if cells := table.Rows[0].Cells; cells[1] != "Unknown" || !strings.Contains(cells[5].(string), "tenancy-does-not-parse") {
		t.Errorf("row %v, want Unknown naming the policy", cells)
	}
	var stderr bytes.Buffer
	reachNotice(&stderr, reach, fleetv1alpha1.TenancyEnforce, "--tenancy=Enforce", tenancy.Namespace{Name: "team-a"})
	if !strings.Contains(stderr.String(), "is in doubt: the manager adds and removes nothing") {
		t.Errorf("notice %q, want the doubt", stderr.String())
	}
	var out bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	losses := tenancy.DryRun(reach, nil, []tenancy.Propagation{{Namespace: "team-a", Name: "web"}}, []tenancy.Member{tenancy.MemberOf(&mc)})
	if err := printLosses(cmd, losses, true); err != nil || !strings.Contains(row(out.String(), "team-a"), "team-a web 1 Unknown <none> <none> TenancyPolicy tenancy-does-not-parse") {
		t.Errorf("dry run (%v):\n%s", err, out.String())
	}
}

func TestTenancyDryRun(t *testing.T) {
	f := newTenancyFleet(t)
	mine := fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{getTestLabel: f.ns})}
	for ns, resources := range map[string][]fleetv1alpha1.ResourceSelector{
		f.teamA: {{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}, {APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role", Name: "reader"}},
		f.teamB: {{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}},
	} {
		// Labelled with the fleet: an unclaimed Propagation would be claimed
		// by the manager another test runs on the shared hub.
		p := &fleetv1alpha1.Propagation{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{fleetv1alpha1.FleetLabel: f.ns}},
			Spec:       fleetv1alpha1.PropagationSpec{Resources: resources, Members: mine},
		}
		if err := f.c.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	res := f.run(t, "tenancy", "dry-run", "-n", f.teamA, "-o", "wide")
	want := f.teamA + " web 3 1 " + f.capiDev + " Role.rbac.authorization.k8s.io in 2 no TenancyPolicy for namespace " + f.teamA + " lets it reach member " + f.capiDev
	if res.code != cli.ExitOK || !strings.HasPrefix(row(res.stdout, f.teamA), want) || !strings.Contains(res.stderr, "1 of 1 Propagations would lose members or kinds") {
		t.Errorf("team-a: exit %d, want a row starting %q\nstdout:\n%s\nstderr:\n%s", res.code, want, res.stdout, res.stderr)
	}
	res = f.run(t, "tenancy", "dry-run", "-n", f.teamB)
	if want := f.teamB + " web 3 3 "; !strings.HasPrefix(row(res.stdout, f.teamB), want) {
		t.Errorf("team-b, no policy: want a row starting %q\nstdout:\n%s\nstderr:\n%s", want, res.stdout, res.stderr)
	}
	for _, args := range [][]string{{"--tenancy=sometimes"}, {"-o", "json"}, {"--fleet-namespace=Fleet"}} {
		if res := runCLI(t, nil, clock.RealClock{}, append([]string{"tenancy", "dry-run", f.hub}, args...)...); res.code != cli.ExitUsage {
			t.Errorf("%q: exit %d, want %d; stderr:\n%s", args, res.code, cli.ExitUsage, res.stderr)
		}
	}
}

// A Propagation that would lose 1,000 members names three and counts the
// rest: a row stays one line.
func TestTenancyDryRunOfAThousandMembersIsBounded(t *testing.T) {
	loss := tenancy.Loss{Namespace: "team-a", Name: "web"}
	for i := range 1000 {
		name := fmt.Sprintf("m-%04d", i)
		loss.Selected = append(loss.Selected, name)
		loss.Excluded = append(loss.Excluded, tenancy.Exclusion{Member: name, Reason: "no TenancyPolicy is for namespace team-a"})
	}
	loss.Refused = []tenancy.Refusal{{Kind: schema.GroupKind{Kind: "ConfigMap"}, Members: loss.Selected}}
	var out bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	if err := printLosses(cmd, []tenancy.Loss{loss}, false); err != nil {
		t.Fatal(err)
	}
	if got, want := row(out.String(), "team-a"), "team-a web 1000 1000 m-0000, m-0001, m-0002 and 997 more ConfigMap in 1000"; got != want || len(out.String()) > 400 {
		t.Errorf("row %q, want %q; output:\n%s", got, want, out.String())
	}
}
