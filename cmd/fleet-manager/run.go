package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	inventoryaccess "sigs.k8s.io/cluster-inventory-api/pkg/access"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/cli"
	"github.com/fleetkube/fleet-manager/pkg/controllers"
	"github.com/fleetkube/fleet-manager/pkg/controllers/clusterprofile"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
	"github.com/fleetkube/fleet-manager/pkg/shard"
	"github.com/fleetkube/fleet-manager/pkg/tenancy"
)

// leaderElectionID names the Lease replicas elect a leader with.
const leaderElectionID = "fleet-manager"

// hubProbeTimeout bounds the check that the hub answers at startup.
const hubProbeTimeout = 30 * time.Second

// allowDuplicateClustersFlag names run's hidden flag that turns off the
// refusal of a second name of one cluster.
const allowDuplicateClustersFlag = "allow-duplicate-clusters"

// anonymousUser is who the hub takes a client without credentials for.
const anonymousUser = "system:anonymous"

type runFlags struct {
	hub              hubFlags
	namespace        string
	metrics          metricsFlags
	probeAddr        string
	leaderElect      bool
	leaseDuration    time.Duration
	renewDeadline    time.Duration
	retryPeriod      time.Duration
	shard            bool
	replicaName      string
	shardLease       shard.Options
	hubQPS           float64
	hubBurst         int
	memberQPS        float64
	memberBurst      int
	cacheSyncTimeout time.Duration
	renewTokens      bool
	// tenancy is whether TenancyPolicies are enforced: Auto, Enforce or
	// Off.
	tenancy         string
	stateDir        string
	controllers     []string
	concurrency     map[string]*int
	health          member.HealthOptions
	policy          kubeconfig.Policy
	mcrSecrets      bool
	capiSecrets     bool
	capiNamespaces  []string
	argoCDSecrets   bool
	argoCDNamespace string
	// clusterProfiles, profileNamespaces and providerFile read members
	// from ClusterProfiles.
	clusterProfiles   bool
	profileNamespaces []string
	providerFile      string
	// exportProfiles publishes a ClusterProfile per member in
	// exportNamespace.
	exportProfiles  bool
	exportNamespace string
	zap             zap.Options

	// allowDuplicateClusters engages every name, even names that reach
	// one cluster (fleet.Options.AllowDuplicateClusters): hidden, for
	// tests and benches that register one API server under many names.
	allowDuplicateClusters bool

	// skipNameValidation lets a test run the manager more than once in a
	// process, which controller-runtime's unique controller names forbid.
	skipNameValidation bool
}

// startManager runs the manager f describes until SIGINT or SIGTERM.
func startManager(f runFlags) error {
	return run(ctrl.SetupSignalHandler(), f, cli.SetupLogging(&f.zap))
}

// newRunCommand returns the run command, which reaches the hub as hub
// says and hands its checked flags to start.
func newRunCommand(hub *hubFlags, start func(runFlags) error) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags]",
		Short: "Run the fleet manager against a hub (the default command)",
		Long: `Run the fleet manager against a hub: register every member whose kubeconfig
Secret sits in the fleet namespace, keep a MemberCluster per member, renew
members' expiring tokens, and serve metrics and health probes. A member being
down never fails /readyz.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.hub = *hub
			if err := f.check(cmd); err != nil {
				return err
			}
			return start(f)
		},
	}
	f.bindFlags(cmd.Flags())
	return cmd
}

// run runs the manager the flags describe until ctx ends, logging to
// logger.
func run(ctx context.Context, f runFlags, logger logr.Logger) error {
	log := logger.WithName("setup")
	cfg, err := hubConfig(f.hub)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(f.hubQPS), f.hubBurst
	user, err := probeHub(ctx, cfg)
	if err != nil {
		return err
	}

	formats := f.secretFormats()
	formatNames := []string{"native"}
	for _, format := range formats {
		formatNames = append(formatNames, format.Name)
	}
	profiles, err := f.clusterProfileSource()
	if err != nil {
		return err
	}
	if profiles != nil {
		formatNames = append(formatNames, registry.ClusterProfileFormat)
	}
	mgr, err := fleet.New(cfg, fleet.Options{
		Options: manager.Options{
			Logger:                        logger,
			Metrics:                       f.metrics.options(),
			HealthProbeBindAddress:        f.probeAddr,
			LeaderElection:                f.leaderElect,
			LeaderElectionID:              leaderElectionID,
			LeaderElectionNamespace:       f.namespace,
			LeaderElectionReleaseOnCancel: true,
			LeaseDuration:                 &f.leaseDuration,
			RenewDeadline:                 &f.renewDeadline,
			RetryPeriod:                   &f.retryPeriod,
			Controller:                    config.Controller{CacheSyncTimeout: f.cacheSyncTimeout, SkipNameValidation: &f.skipNameValidation},
		},
		Shard:            f.shardOptions(),
		Namespace:        f.namespace,
		SecretFormats:    formats,
		ClusterProfiles:  profiles,
		KubeconfigPolicy: f.policy,
		MemberQPS:        float32(f.memberQPS),
		MemberBurst:      f.memberBurst,
		MemberHealth:     f.health,

		AllowDuplicateClusters: f.allowDuplicateClusters,
	})
	if err != nil {
		return fmt.Errorf("creating the fleet manager: %w", err)
	}
	concurrency := map[string]int{}
	for name, n := range f.concurrency {
		concurrency[name] = *n
	}
	j, err := openJournal(f.stateDir, log)
	if err != nil {
		return err
	}
	defer j.close()
	settings := controllers.Settings{Selection: f.controllers, Concurrency: concurrency, Journal: j.Journal, ClusterProfileNamespace: f.exportNamespace, TokenRenewalDisabled: !f.renewTokens, Tenancy: f.tenancy}
	if err := controllers.Start(mgr, controllers.Initializers(), settings); err != nil {
		return err
	}
	// Only the process, its hub and its journal are checked: a member
	// being down must never make this replica unready.
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("registrations", registrationsSynced(mgr)); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	if err := mgr.AddReadyzCheck("journal", j.ready); err != nil {
		return fmt.Errorf("adding the journal's readiness check: %w", err)
	}

	if f.allowDuplicateClusters {
		log.Info("Engaging every registered name, even names that reach one cluster, which then fight over it: --" + allowDuplicateClustersFlag + " is for tests and benches only")
	}
	log.Info("Starting fleet manager", "host", cfg.Host, "user", user, "namespace", f.namespace, "leaderElection", f.leaderElect, "shard", f.shard, "replica", f.replicaName, "formats", formatNames, "tenancy", f.tenancy)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the fleet manager: %w", err)
	}
	log.Info("Fleet manager stopped")
	return nil
}

// shardOptions returns the options of a replica that shares the fleet,
// nil without --shard.
func (f *runFlags) shardOptions() *shard.Options {
	if !f.shard {
		return nil
	}
	o := f.shardLease
	o.Name = f.replicaName
	return &o
}

// defaultReplicaName is $POD_NAME (deploy/ sets it from the downward API),
// else the host name.
func defaultReplicaName() string {
	if name := os.Getenv("POD_NAME"); name != "" {
		return name
	}
	name, _ := os.Hostname()
	return name
}

// bindFlags binds the flags of run to f.
func (f *runFlags) bindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.namespace, "namespace", fleet.DefaultNamespace, "Fleet namespace on the hub: where native (and multicluster-runtime) registration Secrets and the leader election Lease live.")
	f.metrics.bindFlags(fs)
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", `Address the /healthz and /readyz endpoints bind to; "0" disables them.`)
	fs.BoolVar(&f.leaderElect, "leader-elect", false, "Elect a leader with a Lease, so that only one replica runs member caches and controllers. The leader exits with status 1 if it cannot renew the Lease, for example while the hub is down.")
	fs.DurationVar(&f.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long the other replicas wait after the leader's last renewal before taking over.")
	fs.DurationVar(&f.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew the Lease before it gives up and exits.")
	fs.DurationVar(&f.retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often replicas try to acquire or renew the Lease.")
	fs.BoolVar(&f.shard, "shard", false, "Share the fleet with the other replicas started with --shard: each holds a Lease of its own in the fleet namespace, each member is owned by one live replica (rendezvous hashing of its name), which alone connects to it and does its work, and a member moves make-before-break when a replica joins or leaves. Excludes --leader-elect.")
	fs.StringVar(&f.replicaName, "replica-name", "", "With --shard, this replica's name, and its Lease's: unique among the replicas. Default: $POD_NAME, else the host name.")
	fs.DurationVar(&f.shardLease.LeaseDuration, "shard-lease-duration", shard.DefaultLeaseDuration, "With --shard, how long the other replicas wait after a replica's Lease last changed before they take its members over (whole seconds).")
	fs.DurationVar(&f.shardLease.RenewDeadline, "shard-renew-deadline", shard.DefaultRenewDeadline, "With --shard, how long a replica works without renewing its Lease before it stops every member, until it renews again.")
	fs.DurationVar(&f.shardLease.RetryPeriod, "shard-retry-period", shard.DefaultRetryPeriod, "With --shard, how often a replica renews its Lease.")
	fs.DurationVar(&f.shardLease.HandoffTimeout, "shard-handoff-timeout", shard.DefaultHandoffTimeout, "With --shard, how long a handoff waits for the new owners' caches to sync, and a leaving replica for its handoff, before it goes on.")
	fs.Float64Var(&f.hubQPS, "hub-qps", fleet.DefaultHubQPS, "Queries per second the manager's hub client may make.")
	fs.IntVar(&f.hubBurst, "hub-burst", fleet.DefaultHubBurst, "Burst of queries the manager's hub client may make.")
	fs.Float64Var(&f.memberQPS, "member-qps", 50, "Queries per second each member's client may make.")
	fs.IntVar(&f.memberBurst, "member-burst", 100, "Burst of queries each member's client may make.")
	fs.DurationVar(&f.cacheSyncTimeout, "cache-sync-timeout", 2*time.Minute, "How long a controller waits for a cluster's informers to sync.")
	health := member.DefaultHealthOptions()
	fs.DurationVar(&f.health.Interval, "probe-interval", health.Interval, "How often each member is probed: an HTTP/2 PING on its connection, or an authenticated SelfSubjectReview.")
	fs.DurationVar(&f.health.ReviewInterval, "probe-review-interval", health.ReviewInterval, "The longest time between two SelfSubjectReviews of a Ready member, which prove its credentials accepted; its probes in between are HTTP/2 PINGs.")
	fs.DurationVar(&f.health.RetryInterval, "probe-retry-interval", health.RetryInterval, "How soon a member is probed again after a failed probe, so that an outage is confirmed, and a return noticed, quickly.")
	fs.DurationVar(&f.health.Timeout, "probe-timeout", health.Timeout, "How long one probe may take. A probe that times out while the member sends nothing makes it Unhealthy at once; one that times out while the member keeps sending is a success.")
	fs.IntVar(&f.health.FailureThreshold, "probe-failure-threshold", health.FailureThreshold, "Probes in a row that fail with an error (refused, an error status) that make a member Unhealthy: its work is held, its caches kept.")
	fs.DurationVar(&f.health.DisconnectAfter, "disconnect-after", health.DisconnectAfter, "How long probes must keep failing before a member is Disconnected: torn down, then reconnected with backoff once a probe succeeds.")
	table := controllers.Initializers()
	var names []string
	for _, c := range table {
		state := "off"
		if c.OnByDefault {
			state = "on"
		}
		names = append(names, fmt.Sprintf("%s (%s by default)", c.Name, state))
	}
	fs.StringSliceVar(&f.controllers, "controllers", []string{"*"}, "The built-in controllers to run: '*' runs those on by default, 'name' runs one, '-name' stops one. The controllers: "+strings.Join(names, ", ")+".")
	f.concurrency = map[string]*int{}
	for _, c := range table {
		f.concurrency[c.Name] = fs.Int("concurrent-"+c.Name+"-syncs", c.Concurrency, "How many objects the "+c.Name+" controller reconciles at once.")
	}
	fs.StringVar(&f.stateDir, "state-dir", "", "Directory of the journal, the manager's record of the copies it applied in each member and the removals members owe; only one manager may use it at a time. Default: a temporary directory removed at exit, so what is owed is forgotten by a restart (deploy/ mounts one).")
	fs.BoolVar(&f.renewTokens, "renew-tokens", true, "Renew each member's service account token, in a native registration Secret, through the member's TokenRequest API at about 80% of its lifetime, and write it back into the Secret (needs update on Secrets in the fleet namespace). False keeps the tokenrenewal controller describing credentials without renewing them.")
	fs.StringVar(&f.tenancy, "tenancy", fleetv1alpha1.TenancyOff, "Whether the TenancyPolicies decide which members each namespace's Propagations may reach, with which kinds: Enforce (a namespace no policy names reaches nothing), Off (every namespace reaches every member, as before tenancy), or Auto: Enforce for a fleet this version created (its fleet-identity ConfigMap says so), Off for an older fleet until you set Enforce. deploy/ and the chart pass Auto. See docs/tenancy.md.")
	bindPolicyFlags(fs, &f.policy)
	// Hidden, as kube components hide their test-only knobs: two names
	// of one cluster fight over it, so no install should turn this on.
	fs.BoolVar(&f.allowDuplicateClusters, allowDuplicateClustersFlag, false, "For tests and benches only: engage every registered name, even names that reach the same cluster, which then fight over it.")
	_ = fs.MarkHidden(allowDuplicateClustersFlag)

	// Registration formats besides the native one, which is always read.
	fs.BoolVar(&f.mcrSecrets, "multicluster-runtime-secrets", false, "Also register multicluster-runtime kubeconfig Secrets in the fleet namespace. Default: off.")
	fs.BoolVar(&f.capiSecrets, "capi-secrets", false, "Also register Cluster API kubeconfig Secrets. Default: off.")
	fs.StringSliceVar(&f.capiNamespaces, "capi-namespaces", nil, "With --capi-secrets, the comma-separated namespaces to read Cluster API Secrets from. Default: all namespaces.")
	fs.BoolVar(&f.argoCDSecrets, "argocd-secrets", false, "Also register Argo CD cluster Secrets. Default: off.")
	fs.StringVar(&f.argoCDNamespace, "argocd-namespace", "argocd", "With --argocd-secrets, the namespace to read Argo CD cluster Secrets from.")
	fs.BoolVar(&f.clusterProfiles, "cluster-profiles", false, "Also register the ClusterProfiles (multicluster.x-k8s.io/v1alpha1) that list an access provider of --clusterprofile-provider-file, as <namespace>.<name>. Default: off.")
	fs.StringSliceVar(&f.profileNamespaces, "cluster-profile-namespaces", nil, "With --cluster-profiles, the comma-separated namespaces to read ClusterProfiles from, or '*' for every namespace. Whoever may write a ClusterProfile's status there chooses the server its cluster's credentials are sent to: name only namespaces whose writers you trust as you trust the fleet namespace's. Default: none, so no ClusterProfile is read.")
	fs.BoolVar(&f.exportProfiles, "export-cluster-profiles", false, "Publish a ClusterProfile (multicluster.x-k8s.io/v1alpha1) per member in --cluster-profile-namespace: its health, version, labels as properties, and its server and CA as the access provider fleet-manager, never a credential. The same as --controllers=*,clusterprofile. Default: off.")
	fs.StringVar(&f.exportNamespace, "cluster-profile-namespace", "", "With the clusterprofile controller, the namespace the ClusterProfiles are published in. Default: the fleet namespace.")
	fs.StringVar(&f.providerFile, "clusterprofile-provider-file", "", "With --cluster-profiles, the access provider file (the Cluster Inventory API's format): each provider's exec plugin, which --allow-exec-plugin must allow.")
	cli.BindZapFlags(fs, &f.zap)
}

// check reports bad usage of the flags of run, cmd.
func (f *runFlags) check(cmd *cobra.Command) error {
	fs := cmd.Flags()
	if fs.Changed("capi-namespaces") && !f.capiSecrets {
		return usageErrorf("--capi-namespaces needs --capi-secrets, which enables the format it configures")
	}
	if fs.Changed("argocd-namespace") && !f.argoCDSecrets {
		return usageErrorf("--argocd-namespace needs --argocd-secrets, which enables the format it configures")
	}
	if (fs.Changed("cluster-profile-namespaces") || fs.Changed("clusterprofile-provider-file")) && !f.clusterProfiles {
		return usageErrorf("--cluster-profile-namespaces and --clusterprofile-provider-file need --cluster-profiles, which enables the format they configure")
	}
	if err := controllers.Validate(f.controllers, controllers.Initializers()); err != nil {
		return usageErrorf("--controllers: %v", err)
	}
	if f.exportProfiles {
		if slices.Contains(f.controllers, "-"+clusterprofile.ControllerName) {
			return usageErrorf("--export-cluster-profiles runs the %s controller, which --controllers stops", clusterprofile.ControllerName)
		}
		f.controllers = append(f.controllers, clusterprofile.ControllerName)
	}
	if fs.Changed("cluster-profile-namespace") && !controllers.Enabled(f.controllers, clusterprofile.ControllerName, false) {
		return usageErrorf("--cluster-profile-namespace needs --export-cluster-profiles (or --controllers=*,%s), which it configures", clusterprofile.ControllerName)
	}
	if f.clusterProfiles && f.providerFile == "" {
		return usageErrorf("--cluster-profiles needs --clusterprofile-provider-file: a ClusterProfile is read only with one of its access providers")
	}
	if slices.Contains(f.profileNamespaces, registry.AllNamespaces) {
		if len(f.profileNamespaces) > 1 {
			return usageErrorf("--cluster-profile-namespaces: '%s' (every namespace) cannot be given with namespace names", registry.AllNamespaces)
		}
	} else if err := checkNamespaces("cluster-profile-namespaces", f.profileNamespaces...); err != nil {
		return err
	}
	if err := checkNamespaces("namespace", f.namespace); err != nil {
		return err
	}
	if f.exportNamespace == "" {
		f.exportNamespace = f.namespace
	}
	if err := checkNamespaces("cluster-profile-namespace", f.exportNamespace); err != nil {
		return err
	}
	if err := checkNamespaces("capi-namespaces", f.capiNamespaces...); err != nil {
		return err
	}
	if err := checkNamespaces("argocd-namespace", f.argoCDNamespace); err != nil {
		return err
	}
	if err := checkPolicyFlags(f.policy); err != nil {
		return err
	}
	// Mode takes "" for Auto, as a library default; given on the command
	// line, an empty value is more likely a template's mistake.
	if _, err := tenancy.Mode(f.tenancy, nil); err != nil || f.tenancy == "" {
		return usageErrorf("--tenancy %q: want %s, %s or %s", f.tenancy, fleetv1alpha1.TenancyAuto, fleetv1alpha1.TenancyEnforce, fleetv1alpha1.TenancyOff)
	}
	for name, n := range f.concurrency {
		if *n <= 0 {
			return usageErrorf("--concurrent-%s-syncs must be positive", name)
		}
	}
	if f.memberQPS <= 0 || f.memberBurst <= 0 || f.hubQPS <= 0 || f.hubBurst <= 0 {
		return usageErrorf("--member-qps, --member-burst, --hub-qps and --hub-burst must be positive")
	}
	if f.retryPeriod <= 0 || float64(f.renewDeadline) <= leaderelection.JitterFactor*float64(f.retryPeriod) || f.leaseDuration <= f.renewDeadline {
		return usageErrorf("the leader election durations must be positive, with --leader-elect-lease-duration > --leader-elect-renew-deadline > %g × --leader-elect-retry-period", leaderelection.JitterFactor)
	}
	if f.shard && f.leaderElect {
		return usageErrorf("--shard and --leader-elect exclude each other: with --shard every replica works, on the members it owns")
	}
	if f.shard {
		if f.replicaName == "" {
			f.replicaName = defaultReplicaName()
		}
		if err := registry.ValidateName(f.replicaName); err != nil || len(f.replicaName) > 63 {
			return usageErrorf("--replica-name %q must be a DNS-1123 label, as a pod's name is", f.replicaName)
		}
		if l := f.shardLease; l.LeaseDuration%time.Second != 0 || !(l.LeaseDuration > l.RenewDeadline && l.RenewDeadline > l.RetryPeriod && l.RetryPeriod > 0) {
			return usageErrorf("the shard durations must be positive, with --shard-lease-duration (whole seconds) > --shard-renew-deadline > --shard-retry-period")
		}
		if f.shardLease.HandoffTimeout <= 0 {
			return usageErrorf("--shard-handoff-timeout must be positive")
		}
	}
	if f.cacheSyncTimeout <= 0 {
		return usageErrorf("--cache-sync-timeout must be positive")
	}
	if f.health.Interval <= 0 || f.health.RetryInterval <= 0 || f.health.Timeout <= 0 || f.health.FailureThreshold <= 0 || f.health.DisconnectAfter <= 0 {
		return usageErrorf("--probe-interval, --probe-retry-interval, --probe-timeout, --probe-failure-threshold and --disconnect-after must be positive")
	}
	return nil
}

// checkNamespaces reports a usage error unless every name, given with flag
// flagName, is a DNS-1123 label.
func checkNamespaces(flagName string, names ...string) error {
	for _, name := range names {
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			return usageErrorf("invalid value %q for flag --%s: %s", name, flagName, errs[0])
		}
	}
	return nil
}

// secretFormats returns the registration formats the flags enable besides
// the native one.
func (f runFlags) secretFormats() []registry.Format {
	var formats []registry.Format
	if f.mcrSecrets {
		formats = append(formats, registry.MulticlusterRuntimeFormat(f.namespace))
	}
	if f.capiSecrets {
		formats = append(formats, registry.ClusterAPIFormat(f.capiNamespaces))
	}
	if f.argoCDSecrets {
		formats = append(formats, registry.ArgoCDFormat(f.argoCDNamespace))
	}
	return formats
}

// clusterProfileSource returns the ClusterProfiles the flags select, with
// the provider file's access providers; nil without --cluster-profiles.
func (f runFlags) clusterProfileSource() (*registry.ClusterProfiles, error) {
	if !f.clusterProfiles {
		return nil, nil
	}
	providers, err := inventoryaccess.NewFromFile(f.providerFile)
	if err != nil {
		return nil, fmt.Errorf("--clusterprofile-provider-file: %w", err)
	}
	if len(providers.Providers) == 0 {
		return nil, fmt.Errorf("--clusterprofile-provider-file %s names no provider", f.providerFile)
	}
	return &registry.ClusterProfiles{Namespaces: f.profileNamespaces, Providers: providers}, nil
}

// hubConfig returns the manager's hub REST config: the in-cluster config
// unless a hub flag is set, else as hub.restConfig finds it.
func hubConfig(hub hubFlags) (*rest.Config, error) {
	if !hub.set() {
		cfg, err := rest.InClusterConfig()
		if err == nil {
			return rest.AddUserAgent(cfg, "fleet-manager"), nil
		}
		if !errors.Is(err, rest.ErrNotInCluster) {
			return nil, fmt.Errorf("loading the in-cluster hub config: %w", err)
		}
	}
	// Not interactive: the manager is a daemon, with no person at stdin.
	cfg, err := personConfig("hub", hub.kubeconfig, hub.context, nil)
	if err != nil && !hub.set() {
		return nil, fmt.Errorf("%w; fleet-manager is not running in a cluster either", err)
	}
	return cfg, err
}

// registrationsSynced is ready once the hub's registration caches have
// synced: a replica that may not read its Secrets, or cannot reach the
// hub, is not ready.
func registrationsSynced(mgr *fleet.Manager) healthz.Checker {
	return func(*http.Request) error {
		select {
		case <-mgr.Registry().Synced():
			return nil
		default:
			return errors.New("the registrations have not all been read yet: the registration Secrets, and the cluster identities the MemberClusters record")
		}
	}
}

// probeHub fails fast, with a clear message, when the hub does not answer
// or does not know who the manager is, and returns the user it knows.
func probeHub(ctx context.Context, cfg *rest.Config) (string, error) {
	probe := rest.CopyConfig(cfg)
	probe.Timeout = hubProbeTimeout
	client, err := authenticationv1client.NewForConfig(probe)
	if err != nil {
		return "", fmt.Errorf("building a client for the hub at %s: %w", cfg.Host, err)
	}
	review, err := client.SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	var status apierrors.APIStatus
	switch {
	case ctx.Err() != nil:
		return "", ctx.Err()
	case err == nil && review.Status.UserInfo.Username == anonymousUser, apierrors.IsForbidden(err) && !hasCredentials(cfg):
		return "", fmt.Errorf("the hub at %s sees no credentials (it answers as %s): give --hub-kubeconfig a kubeconfig whose user has a token, a client certificate or an exec plugin", cfg.Host, anonymousUser)
	case err == nil:
		return review.Status.UserInfo.Username, nil
	case apierrors.IsUnauthorized(err):
		return "", fmt.Errorf("the hub at %s does not accept the hub kubeconfig's credentials (401 Unauthorized): they may be wrong, expired or revoked", cfg.Host)
	case apierrors.IsForbidden(err):
		return "", fmt.Errorf("the hub at %s forbids the hub kubeconfig's user to review itself (403 Forbidden), which every authenticated user may through the system:basic-user ClusterRole", cfg.Host)
	case apierrors.IsNotFound(err):
		return "", nil // a hub older than SelfSubjectReview: it answered
	case errors.As(err, &status):
		return "", fmt.Errorf("the hub at %s answered with an error: %w", cfg.Host, err)
	default:
		return "", fmt.Errorf("the hub at %s is unreachable: %w", cfg.Host, err)
	}
}

// hasCredentials reports whether cfg carries any credentials.
func hasCredentials(cfg *rest.Config) bool {
	return cfg.BearerToken != "" || cfg.BearerTokenFile != "" || cfg.Username != "" ||
		len(cfg.CertData) > 0 || cfg.CertFile != "" || cfg.ExecProvider != nil || cfg.AuthProvider != nil
}

// runJournal is the manager's journal, and the temporary directory that
// holds it when --state-dir is not set.
type runJournal struct {
	*journal.Journal
	tempDir string
	log     logr.Logger
}

// openJournal opens the journal in stateDir, or in a temporary directory
// when stateDir is "". A journal that could not be used and was moved
// aside is logged at error level. Any other failure stops the start: a
// manager never falls back to a journal it would forget. A temporary
// journal is logged at error level and fails /readyz (ready).
func openJournal(stateDir string, log logr.Logger) (*runJournal, error) {
	rj := &runJournal{log: log}
	dir := stateDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "fleet-manager-state-"); err != nil {
			return nil, fmt.Errorf("creating a temporary state directory: %w", err)
		}
		rj.tempDir = dir
	}
	j, err := journal.Open(dir, journal.Options{})
	switch {
	case err != nil && stateDir == "":
		rj.removeTemp()
		return nil, fmt.Errorf("opening the journal: %w", err)
	case errors.Is(err, journal.ErrLocked):
		return nil, fmt.Errorf("opening the journal: %w", err)
	case err != nil:
		return nil, fmt.Errorf("opening the journal in --state-dir %s: %w; the manager does not start without its journal: fix the volume (permissions, mount, free space) or set another --state-dir", stateDir, err)
	}
	rj.Journal = j
	switch rec := j.Recovered(); {
	case rj.tempDir != "":
		log.Error(errTemporaryJournal, "No --state-dir: removals owed to members that are down are forgotten when the manager exits", "path", rj.Path())
	case rec == nil:
		log.Info("Journal opened", "path", rj.Path())
	case rec.MovedTo == "":
		log.Info("Journal started", "path", rj.Path())
	default:
		log.Error(rec.Err, "The journal could not be used: it was moved aside and a new one started; the copies in each member are recorded again as it is engaged", "path", rj.Path(), "movedTo", rec.MovedTo)
	}
	return rj, nil
}

// errTemporaryJournal is why a manager without --state-dir is not ready.
var errTemporaryJournal = errors.New("the journal is temporary (no --state-dir)")

// ready fails while the journal is temporary, so that a deployment
// without a state volume says so; such a manager runs all the same.
func (rj *runJournal) ready(*http.Request) error {
	if rj.tempDir != "" {
		return errTemporaryJournal
	}
	return nil
}

func (rj *runJournal) close() {
	if err := rj.Close(); err != nil {
		rj.log.Error(err, "Closing the journal")
	}
	rj.removeTemp()
}

func (rj *runJournal) removeTemp() {
	if rj.tempDir != "" {
		_ = os.RemoveAll(rj.tempDir)
	}
}
