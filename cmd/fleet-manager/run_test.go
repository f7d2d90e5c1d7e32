package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetkube/fleet-manager/internal/cli"
	"github.com/fleetkube/fleet-manager/pkg/controllers"
	"github.com/fleetkube/fleet-manager/pkg/controllers/clusterprofile"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// parseRunFlags parses and checks args as fleet-manager run would, and
// returns the flags it would run the manager with. Bad usage is printed
// to stderr and returned as cli.ErrUsage.
func parseRunFlags(args []string, stderr io.Writer) (runFlags, error) {
	var f runFlags
	root := newRootCommand(func(parsed runFlags) error { f = parsed; return nil })
	switch code := executeRoot(root, append([]string{"run"}, args...), io.Discard, stderr); code {
	case cli.ExitOK:
		return f, nil
	case cli.ExitUsage:
		return f, cli.ErrUsage
	default:
		return f, fmt.Errorf("exit code %d", code)
	}
}

func TestRunFlags(t *testing.T) {
	type format struct {
		name       string
		namespaces []string
	}
	cases := map[string]struct {
		args    []string
		policy  kubeconfig.Policy
		formats []format
	}{
		"defaults": {},
		"policy": {
			args: []string{"--allow-insecure-tls", "--allow-exec-plugin=kubelogin", "--allow-exec-plugin=argocd-k8s-auth",
				"--allow-plain-http-loopback", "--allow-proxy", "--allow-link-local"},
			policy: kubeconfig.Policy{
				AllowInsecureTLS:       true,
				AllowExecCommands:      []string{"kubelogin", "argocd-k8s-auth"},
				AllowPlainHTTPLoopback: true,
				AllowProxy:             true,
				AllowLinkLocal:         true,
			},
		},
		"every format": {
			args:    []string{"--namespace=fleet", "--multicluster-runtime-secrets", "--capi-secrets", "--argocd-secrets"},
			formats: []format{{"multicluster-runtime", []string{"fleet"}}, {"cluster-api", nil}, {"argocd", []string{"argocd"}}},
		},
		"format namespaces": {
			args:    []string{"--capi-secrets", "--capi-namespaces=team-a,team-b", "--argocd-secrets", "--argocd-namespace=gitops"},
			formats: []format{{"cluster-api", []string{"team-a", "team-b"}}, {"argocd", []string{"gitops"}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			f, err := parseRunFlags(tc.args, &stderr)
			if err != nil {
				t.Fatalf("parseRunFlags: %v\n%s", err, stderr.String())
			}
			if !reflect.DeepEqual(f.policy, tc.policy) {
				t.Errorf("policy = %+v, want %+v", f.policy, tc.policy)
			}
			var got []format
			for _, ft := range f.secretFormats() {
				got = append(got, format{ft.Name, ft.Namespaces})
			}
			if !reflect.DeepEqual(got, tc.formats) {
				t.Errorf("formats = %v, want %v", got, tc.formats)
			}
		})
	}
}

func TestRunUsageErrors(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string // in the message
	}{
		"capi namespaces alone":       {args: []string{"--capi-namespaces=team-a"}, want: "--capi-namespaces needs --capi-secrets"},
		"capi namespaces, capi off":   {args: []string{"--capi-secrets=false", "--capi-namespaces=team-a"}, want: "--capi-namespaces needs --capi-secrets"},
		"argocd namespace alone":      {args: []string{"--argocd-namespace=argocd"}, want: "--argocd-namespace needs --argocd-secrets"},
		"bad capi namespace":          {args: []string{"--capi-secrets", "--capi-namespaces=team-a,Team_B"}, want: `invalid value "Team_B" for flag --capi-namespaces`},
		"empty capi namespace":        {args: []string{"--capi-secrets", "--capi-namespaces=team-a,"}, want: `invalid value "" for flag --capi-namespaces`},
		"bad argocd namespace":        {args: []string{"--argocd-secrets", "--argocd-namespace=argo.cd"}, want: `invalid value "argo.cd" for flag --argocd-namespace`},
		"bad fleet namespace":         {args: []string{"--namespace=Fleet"}, want: `invalid value "Fleet" for flag --namespace`},
		"profiles without providers":  {args: []string{"--cluster-profiles"}, want: "--cluster-profiles needs --clusterprofile-provider-file"},
		"provider file alone":         {args: []string{"--clusterprofile-provider-file=p.json"}, want: "need --cluster-profiles"},
		"export namespace alone":      {args: []string{"--cluster-profile-namespace=inventory"}, want: "--cluster-profile-namespace needs --export-cluster-profiles"},
		"bad export namespace":        {args: []string{"--export-cluster-profiles", "--cluster-profile-namespace=Inv"}, want: `invalid value "Inv" for flag --cluster-profile-namespace`},
		"bad profile namespace":       {args: []string{"--cluster-profiles", "--clusterprofile-provider-file=p.json", "--cluster-profile-namespaces=inv,Inv"}, want: `invalid value "Inv" for flag --cluster-profile-namespaces`},
		"'*' and a profile namespace": {args: []string{"--cluster-profiles", "--clusterprofile-provider-file=p.json", "--cluster-profile-namespaces=*,inv"}, want: "--cluster-profile-namespaces: '*' (every namespace) cannot be given with namespace names"},
		"empty exec plugin":           {args: []string{"--allow-exec-plugin="}, want: "--allow-exec-plugin must name a command"},
		"positional argument":         {args: []string{"extra"}, want: `unexpected argument "extra"`},
		"nonpositive hub qps":         {args: []string{"--hub-qps=0"}, want: "--hub-qps and --hub-burst must be positive"},
		"renew after lease":           {args: []string{"--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=6s"}, want: "--leader-elect-lease-duration > --leader-elect-renew-deadline"},
		"renew within retry":          {args: []string{"--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=2s"}, want: "--leader-elect-renew-deadline > 1.2 × --leader-elect-retry-period"},
		"nonpositive cache sync time": {args: []string{"--cache-sync-timeout=0s"}, want: "--cache-sync-timeout must be positive"},
		"unknown controller":          {args: []string{"--controllers=*,-nonesuch"}, want: `--controllers: "-nonesuch" is not a controller: the controllers are membercluster`},
		"nonpositive concurrency":     {args: []string{"--concurrent-membercluster-syncs=0"}, want: "--concurrent-membercluster-syncs must be positive"},
		"export, its controller off":  {args: []string{"--export-cluster-profiles", "--controllers=*,-clusterprofile"}, want: "--export-cluster-profiles runs the clusterprofile controller, which --controllers stops"},
		"nonpositive probe threshold": {args: []string{"--probe-failure-threshold=0"}, want: "--probe-failure-threshold and --disconnect-after must be positive"},
		"unknown tenancy":             {args: []string{"--tenancy=enforce"}, want: `--tenancy "enforce": want Auto, Enforce or Off`},
		"empty tenancy":               {args: []string{"--tenancy="}, want: `--tenancy "": want Auto, Enforce or Off`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			if _, err := parseRunFlags(tc.args, &stderr); !errors.Is(err, cli.ErrUsage) {
				t.Errorf("parseRunFlags: got %v, want cli.ErrUsage", err)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tc.want)
			}
			stderr.Reset()
			if code := execute(append([]string{"run"}, tc.args...), &stderr, &stderr); code != cli.ExitUsage {
				t.Errorf("exit code = %d, want %d", code, cli.ExitUsage)
			}
		})
	}
}

// ClusterProfiles are read from no namespace until some are named, or
// every one with '*': whoever writes a profile's status chooses where its
// cluster's credentials go.
func TestRunClusterProfileNamespaces(t *testing.T) {
	providers := writeTemp(t, "providers.json", []byte(`{"providers": [{"name": "secretreader", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "secretreader-plugin"}}]}`))
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"default":          {},
		"named":            {args: []string{"--cluster-profile-namespaces=team-a,team-b"}, want: []string{"team-a", "team-b"}},
		"every namespace":  {args: []string{"--cluster-profile-namespaces=*"}, want: []string{registry.AllNamespaces}},
		"explicitly empty": {args: []string{"--cluster-profile-namespaces="}},
	} {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			f, err := parseRunFlags(append([]string{"--cluster-profiles", "--clusterprofile-provider-file=" + providers}, tc.args...), &stderr)
			if err != nil {
				t.Fatalf("parseRunFlags: %v\n%s", err, stderr.String())
			}
			profiles, err := f.clusterProfileSource()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(profiles.Namespaces, tc.want) {
				t.Errorf("namespaces %q, want %q", profiles.Namespaces, tc.want)
			}
		})
	}
}

func TestRunControllerFlags(t *testing.T) {
	var stderr bytes.Buffer
	f, err := parseRunFlags(nil, &stderr)
	if err != nil {
		t.Fatalf("parseRunFlags: %v\n%s", err, stderr.String())
	}
	if !reflect.DeepEqual(f.controllers, []string{"*"}) || *f.concurrency["membercluster"] != membercluster.DefaultWorkers {
		t.Errorf("defaults: controllers %q, membercluster concurrency %d", f.controllers, *f.concurrency["membercluster"])
	}
	f, err = parseRunFlags([]string{"--controllers=*,-membercluster", "--concurrent-membercluster-syncs=3"}, &stderr)
	if err != nil {
		t.Fatalf("parseRunFlags: %v\n%s", err, stderr.String())
	}
	if !reflect.DeepEqual(f.controllers, []string{"*", "-membercluster"}) || *f.concurrency["membercluster"] != 3 {
		t.Errorf("controllers %q, membercluster concurrency %d", f.controllers, *f.concurrency["membercluster"])
	}
	// --export-cluster-profiles is the clusterprofile controller's switch,
	// as --controllers naming it is; either takes its namespace.
	for _, args := range [][]string{
		{"--export-cluster-profiles", "--cluster-profile-namespace=inventory"},
		{"--controllers=*,clusterprofile", "--cluster-profile-namespace=inventory"},
	} {
		f, err = parseRunFlags(args, &stderr)
		if err != nil {
			t.Fatalf("parseRunFlags %q: %v\n%s", args, err, stderr.String())
		}
		if !controllers.Enabled(f.controllers, clusterprofile.ControllerName, false) || f.exportNamespace != "inventory" {
			t.Errorf("%q: controllers %q, namespace %q; want clusterprofile on, in inventory", args, f.controllers, f.exportNamespace)
		}
	}
	if f, err = parseRunFlags(nil, &stderr); err != nil || controllers.Enabled(f.controllers, clusterprofile.ControllerName, false) {
		t.Errorf("by default: controllers %q (%v), want clusterprofile off", f.controllers, err)
	}
}

// --tenancy defaults to Off, as before tenancy (deploy/ and the chart pass
// Auto, which the propagation controller resolves from the fleet's
// identity); each mode is handed over as given.
func TestRunTenancyFlag(t *testing.T) {
	for args, want := range map[string]string{"": "Off", "--tenancy=Enforce": "Enforce", "--tenancy=Off": "Off", "--tenancy=Auto": "Auto"} {
		var stderr bytes.Buffer
		f, err := parseRunFlags(strings.Fields(args), &stderr)
		if err != nil {
			t.Fatalf("%q: %v\n%s", args, err, stderr.String())
		}
		if f.tenancy != want {
			t.Errorf("%q: tenancy %q, want %q", args, f.tenancy, want)
		}
	}
}

func TestRunHealthFlags(t *testing.T) {
	var stderr bytes.Buffer
	f, err := parseRunFlags([]string{"--probe-interval=2s", "--probe-review-interval=20s", "--probe-retry-interval=250ms", "--probe-timeout=1s", "--probe-failure-threshold=4", "--disconnect-after=30s"}, &stderr)
	if err != nil {
		t.Fatalf("parseRunFlags: %v\n%s", err, stderr.String())
	}
	want := member.HealthOptions{Interval: 2 * time.Second, ReviewInterval: 20 * time.Second, RetryInterval: 250 * time.Millisecond, Timeout: time.Second, FailureThreshold: 4, DisconnectAfter: 30 * time.Second}
	if f.health != want {
		t.Fatalf("health = %+v, want %+v", f.health, want)
	}
	// A frozen member: its first probe starts up to an interval after it
	// froze, and each probe takes the timeout.
	f, _ = parseRunFlags(nil, &stderr)
	if worst := f.health.Interval + time.Duration(f.health.FailureThreshold)*f.health.Timeout + time.Duration(f.health.FailureThreshold-1)*f.health.RetryInterval; worst > 15*time.Second {
		t.Fatalf("default health %+v may take %s to find a frozen member, over 15s", f.health, worst)
	}
}

func TestRunHubAndLeaderFlags(t *testing.T) {
	var stderr bytes.Buffer
	f, err := parseRunFlags(nil, &stderr)
	if err != nil {
		t.Fatalf("parseRunFlags: %v\n%s", err, stderr.String())
	}
	if f.hubQPS != fleet.DefaultHubQPS || f.hubBurst != fleet.DefaultHubBurst {
		t.Errorf("hub limits = %g/%d, want the fleet defaults %d/%d", f.hubQPS, f.hubBurst, fleet.DefaultHubQPS, fleet.DefaultHubBurst)
	}
	f, err = parseRunFlags([]string{"--hub-qps=30", "--hub-burst=60", "--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}, &stderr)
	if err != nil {
		t.Fatalf("parseRunFlags: %v\n%s", err, stderr.String())
	}
	if f.hubQPS != 30 || f.hubBurst != 60 || f.leaseDuration != 4*time.Second || f.renewDeadline != 3*time.Second || f.retryPeriod != 500*time.Millisecond {
		t.Errorf("flags = %+v", f)
	}
}
