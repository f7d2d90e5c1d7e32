package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetkube/fleet-manager/internal/enroll"
)

// memberFlags say how a person's own kubeconfig reaches a member.
type memberFlags struct {
	kubeconfig string
	context    string
}

func (m *memberFlags) bindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&m.kubeconfig, "member-kubeconfig", "", "Path to your kubeconfig of the member. Default: $KUBECONFIG and the default loading rules. Its credentials are used only to reach the member, never copied.")
	fs.StringVar(&m.context, "member-context", "", "Context of the member's kubeconfig to use. Default: its current context.")
}

// restConfig returns the member's REST config as kubectl finds it (see
// personConfig).
func (m *memberFlags) restConfig() (*rest.Config, error) {
	return personConfig("member", m.kubeconfig, m.context, os.Stdin)
}

// newRegisterCommand returns "register NAME".
func newRegisterCommand(hub *hubFlags) *cobra.Command {
	var (
		memberFlags            memberFlags
		o                      enroll.Options
		labels, dryRun, output string
		wait                   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "register NAME --permissions=fleet|view|edit|cluster-admin | --cluster-role=NAME",
		Short: "Register a member cluster with the fleet, with least-privilege, short-lived credentials",
		Long: `Register the member cluster that your kubeconfig reaches as NAME.

In the member, it creates (or updates) the namespace fleet-system, the
ServiceAccount fleet-system/fleet-manager, the bindings --permissions or
--cluster-role name, and a Role that lets the ServiceAccount mint tokens for
itself only, so that the manager can renew them.

--permissions=fleet grants what the fleet's controllers need and nothing
else: get and create namespaces, and get, list, watch, create, update, patch
and delete the kinds the hub's Propagations copy (their resources and the
kinds their status lists), in a ClusterRole fleet-manager:fleet; with
--namespaces, get those namespaces, and the kinds in a Role of each. It leaves
out, with a warning, kinds the member does not serve, cluster-scoped ones,
RBAC kinds, and Secrets without --namespaces; it never grants tokens,
impersonation, escalate or bind. The rights follow the Propagations at the
time of register: "fleet-manager grants sync" (or register again) updates the
rules in place when they change. The built-in presets warn on stderr: view cannot carry a Propagation,
which writes; edit without --namespaces lets the holder read every Secret and
create tokens for and impersonate any ServiceAccount, a cluster-admin one
included; cluster-admin allows everything.

Each object is labelled app.kubernetes.io/managed-by=fleet-manager,
fleet.fleetkube.io/cluster-name=NAME and fleet.fleetkube.io/fleet-id with the fleet's identity, which it reads (or
creates) in ConfigMap fleet-identity of the fleet namespace on the hub. A
fleet-system namespace that exists already is used as it is. It refuses to
touch an object of those names that another fleet, or anyone else, made;
objects an earlier register made without a fleet identity it stamps only when
the hub's Secret NAME already points at this member.

It then mints a token from the member's TokenRequest API (no token Secret)
and writes the registration Secret NAME on the hub: the member's server and
CA, from your kubeconfig, and that token. Your own credentials reach the
member and are never copied. Running it again changes nothing in the member
and updates the Secret in place with a new token; when that Secret pointed at
another server, it warns.

Then it waits until the manager reports the member Ready by a probe with the
credentials it wrote (the MemberCluster's status.observedSecretVersion): a
Ready recorded earlier may be one no manager probes any more.`,
		Example: `  fleet-manager register eu-1 --member-context=eu-1 --permissions=fleet
  fleet-manager register eu-1 --permissions=fleet --dry-run
  fleet-manager register eu-1 --permissions=fleet --namespaces=shop,web --labels=env=prod
  fleet-manager register eu-1 --cluster-role=fleet-reader --server=https://10.0.0.7:6443
  fleet-manager register eu-1 --permissions=view --dry-run -o yaml`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkRegisterFlags(&o, labels, dryRun, output); err != nil {
				return err
			}
			o.Name = args[0]
			if err := registry.ValidateName(o.Name); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return usageErrorf("%s", strings.ReplaceAll(err.Error(), "\n", "; "))
			}
			memberCfg, err := memberFlags.restConfig()
			if err != nil {
				return err
			}
			waiting := wait > 0 && o.DryRun == enroll.DryRunNone
			var hubClient client.Client
			if o.DryRun != enroll.DryRunClient || o.Preset == enroll.FleetPreset {
				if hubClient, err = hub.client(); err != nil {
					return err
				}
			}
			if waiting {
				if err := enroll.CheckCRD(cmd.Context(), hubClient); err != nil {
					return crdError(err)
				}
			}
			res, err := enroll.Register(cmd.Context(), memberCfg, hubClient, o)
			if err != nil {
				return memberError(err)
			}
			for _, w := range res.Warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "Warning: %s\n", w)
			}
			if res.Rights != nil {
				for _, n := range res.Rights.Notes() {
					fmt.Fprintf(cmd.ErrOrStderr(), "Note: %s\n", n)
				}
			}
			if err := printRegistered(cmd.OutOrStdout(), res, o.DryRun, output); err != nil {
				return err
			}
			if !waiting {
				return nil
			}
			mc, err := waitProbed(cmd.Context(), hubClient, o.HubNamespace, o.Name, res.SecretVersion, wait, func(state string) {
				fmt.Fprintf(cmd.ErrOrStderr(), "Waiting for MemberCluster %s to be Ready: %s\n", o.Name, state)
			})
			if err != nil {
				return crdError(err)
			}
			if output == "" {
				fmt.Fprintf(cmd.OutOrStdout(), "MemberCluster %s is %s (Kubernetes %s)\n", mc.Name, mc.Status.State, mc.Status.ServerVersion)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	memberFlags.bindFlags(fs)
	fs.StringVar(&o.Preset, "permissions", "", "What the fleet may do in the member: fleet (what the hub's Propagations need, computed when it runs), or the built-in ClusterRoles view (Propagations fail Forbidden), edit or cluster-admin. Required unless --cluster-role is given; there is no default.")
	fs.StringVar(&o.ClusterRole, "cluster-role", "", "Bind this existing ClusterRole of the member instead of a --permissions preset.")
	fs.StringSliceVar(&o.Namespaces, "namespaces", nil, "Grant the permissions only in these existing namespaces (RoleBindings; with fleet, Roles of its rules), not cluster-wide. Not with cluster-admin.")
	fs.DurationVar(&o.TokenTTL, "token-ttl", enroll.DefaultTokenTTL, "Lifetime asked for the member's token, from 10m to 24h (the member's API server may shorten it). The manager renews it, asking for as long, up to 24h.")
	fs.StringVar(&o.Server, "server", "", "The member's URL as the hub reaches it. Default: the server of your member kubeconfig.")
	fs.StringVar(&labels, "labels", "", "The cluster's labels, k=v,k2=v2, set on the registration Secret (others on it are kept).")
	fs.StringVar(&o.HubNamespace, "namespace", enroll.MemberNamespace, "The fleet namespace on the hub, where the registration Secret goes.")
	fs.DurationVar(&wait, "wait", 2*time.Minute, "How long to wait for the MemberCluster to be Ready, by a probe with the credentials written; 0 does not wait.")
	fs.StringVar(&dryRun, "dry-run", string(enroll.DryRunNone), `"none", "client" (send nothing; fleet still reads the hub's Propagations and the member's kinds) or "server" (send the writes with dryRun=All; no token is minted). --dry-run alone is client.`)
	fs.Lookup("dry-run").NoOptDefVal = string(enroll.DryRunClient)
	fs.StringVarP(&output, "output", "o", "", `"yaml": print the objects written (or that would be), member ones first, the token redacted.`)
	return cmd
}

// checkRegisterFlags reports bad usage, and sets o from the flags that
// need parsing.
func checkRegisterFlags(o *enroll.Options, labels, dryRun, output string) error {
	switch {
	case o.Preset == "" && o.ClusterRole == "":
		return usageErrorf("name the permissions: --permissions=fleet|view|edit|cluster-admin or --cluster-role=NAME (there is no default)")
	case o.Preset != "" && o.ClusterRole != "":
		return usageErrorf("--permissions and --cluster-role exclude each other")
	case o.Preset != "" && !slices.Contains(enroll.Presets, o.Preset):
		return usageErrorf("--permissions must be fleet, view, edit or cluster-admin, not %q", o.Preset)
	case o.Preset == "cluster-admin" && len(o.Namespaces) > 0:
		return usageErrorf("--namespaces wants --permissions=fleet, edit or view: cluster-admin is cluster-wide")
	case slices.Contains(o.Namespaces, ""):
		return usageErrorf("--namespaces must name namespaces")
	case o.TokenTTL < enroll.MinTokenTTL || o.TokenTTL > enroll.MaxTokenTTL:
		return usageErrorf("--token-ttl must be at least 10m and at most 24h, not %s", o.TokenTTL)
	case !slices.Contains([]string{"", "yaml"}, output):
		return usageErrorf("--output must be yaml, not %q", output)
	}
	switch d := enroll.DryRun(dryRun); d {
	case enroll.DryRunNone, enroll.DryRunClient, enroll.DryRunServer:
		o.DryRun = d
	default:
		return usageErrorf("--dry-run must be none, client or server, not %q", dryRun)
	}
	l, err := enroll.ParseLabels(labels)
	if err != nil {
		return usageErrorf("--labels: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	o.Labels = l
	return nil
}

// memberError says what a person can do about err.
func memberError(err error) error {
	var unreachable *enroll.UnreachableError
	var forbidden *enroll.ForbiddenError
	switch {
	case errors.As(err, &unreachable):
		return fmt.Errorf("%w; check --member-kubeconfig/--member-context", err)
	case errors.As(err, &forbidden) && forbidden.Resource == "ClusterRoleBindings":
		return fmt.Errorf("%w; ask a cluster admin or use --namespaces", err)
	case errors.As(err, &forbidden):
		return fmt.Errorf("%w; ask a cluster admin", err)
	}
	return err
}

// crdError says what to do about a hub without the MemberCluster CRD.
func crdError(err error) error {
	if errors.Is(err, enroll.ErrNoCRD) {
		return fmt.Errorf("%w, or use --wait=0", errNoCRD)
	}
	return err
}

// printRegistered prints what Register did: a line per object, or with
// -o yaml the objects.
func printRegistered(w io.Writer, res *enroll.Result, dryRun enroll.DryRun, output string) error {
	if output == "yaml" {
		return enroll.WriteYAML(w, res.Objects())
	}
	suffix := map[enroll.DryRun]string{enroll.DryRunClient: " (dry run)", enroll.DryRunServer: " (server dry run)"}[dryRun]
	for _, c := range res.Member {
		fmt.Fprintf(w, "member: %s %s%s\n", enroll.Describe(c.Object), c.Op, suffix)
		if c.Op != "deleted" {
			printRules(w, c.Object)
		}
	}
	s := res.Secret.Object
	expiry := ""
	if !res.TokenExpiry.IsZero() {
		expiry = fmt.Sprintf(" (its token expires at %s)", res.TokenExpiry.UTC().Format(time.RFC3339))
	}
	repointed := ""
	if res.PreviousServer != "" {
		repointed = fmt.Sprintf(", re-pointed from %s", res.PreviousServer)
	}
	_, err := fmt.Fprintf(w, "hub: %s %s%s%s%s\n", enroll.Describe(s), res.Secret.Op, suffix, repointed, expiry)
	return err
}

// printRules prints, under a ClusterRole or Role, what each rule allows.
func printRules(w io.Writer, obj client.Object) {
	var rules []rbacv1.PolicyRule
	switch r := obj.(type) {
	case *rbacv1.ClusterRole:
		rules = r.Rules
	case *rbacv1.Role:
		rules = r.Rules
	}
	for _, rule := range rules {
		fmt.Fprintf(w, "  may %s\n", enroll.DescribeRule(rule))
	}
}
