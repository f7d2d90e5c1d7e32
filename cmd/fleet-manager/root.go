package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/cli"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// scheme holds what the commands read and write on the hub and members.
var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(fleetv1alpha1.AddToScheme(scheme))
}

// The names the binary answers to as a kubectl plugin: "kubectl fleet
// ARGS" runs kubectl-fleet ARGS, and kubectl completes "kubectl fleet"
// by running kubectl_complete-fleet ARGS.
const (
	pluginName           = "kubectl-fleet"
	pluginCompletionName = "kubectl_complete-fleet"
)

// execute runs the command args name, run if args name none, and returns
// the exit code. Named as a kubectl plugin (os.Args[0]), it presents
// itself as "kubectl fleet" and runs no command by default.
func execute(args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(startManager)
	switch filepath.Base(os.Args[0]) {
	case pluginCompletionName:
		args = append([]string{cobra.ShellCompRequestCmd}, args...)
		fallthrough
	case pluginName:
		asPlugin(root)
		root.SetArgs(args)
		return executeArgs(root, stdout, stderr)
	}
	return executeRoot(root, args, stdout, stderr)
}

// asPlugin makes root present itself as the kubectl plugin "kubectl
// fleet", in its usage and examples, with no default command.
func asPlugin(root *cobra.Command) {
	root.Use = pluginName
	root.Annotations[cobra.CommandDisplayNameAnnotation] = "kubectl fleet"
	root.Long = strings.Replace(root.Long, "Without a command, it runs the\nmanager (\"fleet-manager run\").", "As \"kubectl fleet\", it runs\nthe manager only when told to (\"kubectl fleet run\").", 1)
	var rename func(*cobra.Command)
	rename = func(c *cobra.Command) {
		c.Short = strings.TrimSuffix(c.Short, " (the default command)")
		c.Example = strings.ReplaceAll(c.Example, "fleet-manager ", "kubectl fleet ")
		for _, sub := range c.Commands() {
			rename(sub)
		}
	}
	rename(root)
}

// executeRoot runs root with args, run if args name no command, and
// returns the exit code.
func executeRoot(root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SetArgs(defaultToRun(root, args))
	return executeArgs(root, stdout, stderr)
}

// executeArgs runs root with the arguments it was given and returns the
// exit code.
func executeArgs(root *cobra.Command, stdout, stderr io.Writer) int {
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	exit, exitCode := errors.AsType[*exitCodeError](err)
	switch {
	case err == nil:
		return cli.ExitOK
	case exitCode:
		return exit.code
	case errors.As(err, new(*usageError)):
		fmt.Fprintf(stderr, "Error: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return cli.ExitUsage
	default:
		fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
		return cli.ExitError
	}
}

// defaultToRun makes run the command when args name none: when they are
// empty, start with one of run's flags, or name no command after the
// root's own flags, as in "--hub-kubeconfig hub.yaml --leader-elect".
// A first word that is no command is left for cobra to call unknown.
func defaultToRun(root *cobra.Command, args []string) []string {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case i == 0 && (a == "-h" || a == "--help" || a == "-v" || a == "--version"):
			return args
		case a == "--hub-kubeconfig" || a == "--hub-context" || a == "--kubeconfig" || a == "--context":
			i++ // the flag's value
		case strings.HasPrefix(a, "-"):
		case i == 0 || isCommand(root, a):
			return args
		default:
			return append([]string{"run"}, args...)
		}
	}
	return append([]string{"run"}, args...)
}

// isCommand reports whether name names one of root's commands, those
// cobra adds included.
func isCommand(root *cobra.Command, name string) bool {
	if name == "help" || name == "completion" || strings.HasPrefix(name, "__") {
		return true
	}
	for _, c := range root.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return true
		}
	}
	return false
}

// newRootCommand returns the fleet-manager command and its subcommands;
// run hands its checked flags to start.
func newRootCommand(start func(runFlags) error) *cobra.Command {
	var hub hubFlags
	root := &cobra.Command{
		Use:   "fleet-manager",
		Short: "Run a fleet of Kubernetes clusters from a hub, and register its members",
		Long: `fleet-manager runs a fleet of Kubernetes clusters from a hub cluster. Each member is
registered by a kubeconfig Secret on the hub; "fleet-manager register" writes one
with least-privilege, self-renewing credentials. Without a command, it runs the
manager ("fleet-manager run"). kubectl's --kubeconfig and --context are taken
for --hub-kubeconfig and --hub-context.`,
		Version:           currentVersion().Version,
		Args:              noArgs,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
		RunE:              func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetVersionTemplate("{{.Annotations.fullVersion}}")
	root.Annotations = map[string]string{"fullVersion": currentVersion().String()}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.SetGlobalNormalizationFunc(kubectlFlagNames)
	hub.bindFlags(root.PersistentFlags())
	root.AddCommand(
		newRunCommand(&hub, start),
		newRegisterCommand(&hub),
		newUnregisterCommand(&hub),
		newGrantsCommand(&hub),
		newGetCommand(&hub),
		newTenancyCommand(&hub),
		newStatusCommand(&hub),
		newRolloutCommand(&hub),
		newCordonCommand(&hub),
		newUncordonCommand(&hub),
		newDrainCommand(&hub),
		newUninstallCommand(&hub),
		newCheckKubeconfigCommand(),
		newDemoCommand(),
		newVersionCommand(),
	)
	return root
}

// usageError is bad usage: the command exits 2 and points at its help.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usageErrorf returns a usage error, which is printed with a pointer to
// the help of the command that returned it.
func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// noArgs refuses positional arguments as bad usage.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			return usageErrorf("unknown command %q for %q", args[0], cmd.CommandPath())
		}
		return usageErrorf("unexpected argument %q", args[0])
	}
	return nil
}

// exactArgs wants n positional arguments, named names in its message.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s wants %s, got %d arguments", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}

// hubFlags say how every command reaches the hub.
type hubFlags struct {
	kubeconfig string
	context    string
}

func (h *hubFlags) bindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&h.kubeconfig, "hub-kubeconfig", "", "Path to the hub's kubeconfig. Default: $KUBECONFIG and the default loading rules (for run, the in-cluster config first).")
	fs.StringVar(&h.context, "hub-context", "", "Context of the hub's kubeconfig to use. Default: its current context.")
}

// kubectlFlagNames takes kubectl's --kubeconfig and --context for
// --hub-kubeconfig and --hub-context, as "kubectl fleet" users type
// them: the cluster kubectl talks to is the hub.
func kubectlFlagNames(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	switch name {
	case "kubeconfig":
		name = "hub-kubeconfig"
	case "context":
		name = "hub-context"
	}
	return pflag.NormalizedName(name)
}

// set reports whether either flag names a kubeconfig or context.
func (h *hubFlags) set() bool { return h.kubeconfig != "" || h.context != "" }

// restConfig returns the hub's REST config for a person's command, as
// kubectl finds it: see personConfig.
func (h *hubFlags) restConfig() (*rest.Config, error) {
	return personConfig("hub", h.kubeconfig, h.context, os.Stdin)
}

// personConfig returns the REST config of the cluster that a person's
// kubeconfig reaches, as kubectl finds it: the file path names, else
// $KUBECONFIG and ~/.kube/config, with the context kubeContext names, else
// the current one. With stdin, an exec plugin may ask the person for
// input there, as with kubectl. A person's kubeconfig is trusted, unlike
// a member's from a Secret; which is named by which ("hub" or "member")
// and its --<which>-kubeconfig flag.
func personConfig(which, path, kubeContext string, stdin io.Reader) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	overrides := &clientcmd.ConfigOverrides{CurrentContext: kubeContext}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	if stdin != nil {
		loader = clientcmd.NewInteractiveDeferredLoadingClientConfig(rules, overrides, stdin)
	}
	cfg, err := loader.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return nil, fmt.Errorf("no %s kubeconfig: neither --%s-kubeconfig, $KUBECONFIG nor ~/.kube/config names one", which, which)
	}
	if err != nil {
		return nil, fmt.Errorf("loading the %s kubeconfig: %w", which, err)
	}
	return rest.AddUserAgent(cfg, "fleet-manager"), nil
}

// client returns a client for the hub, for the commands a person runs.
func (h *hubFlags) client() (client.Client, error) {
	cfg, err := h.restConfig()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// bindPolicyFlags binds the flags that relax the member kubeconfig policy
// p, each one check.
func bindPolicyFlags(fs *pflag.FlagSet, p *kubeconfig.Policy) {
	fs.BoolVar(&p.AllowInsecureTLS, "allow-insecure-tls", false, "Accept member kubeconfigs with insecure-skip-tls-verify. Default: refused.")
	fs.StringArrayVar(&p.AllowExecCommands, "allow-exec-plugin", nil, "Accept member kubeconfigs whose exec plugin runs this exact `command` (repeatable; \"aws\" does not match \"/usr/bin/aws\"). Default: every exec plugin is refused.")
	fs.BoolVar(&p.AllowPlainHTTPLoopback, "allow-plain-http-loopback", false, "Accept http:// member servers on a loopback address or localhost. Default: https only.")
	fs.BoolVar(&p.AllowProxy, "allow-proxy", false, "Accept member kubeconfigs with a proxy-url. Default: refused.")
	fs.BoolVar(&p.AllowLinkLocal, "allow-link-local", false, "Accept member server and proxy hosts that are link-local or cloud metadata addresses. Default: refused.")
}

// checkPolicyFlags reports bad usage of the policy flags.
func checkPolicyFlags(p kubeconfig.Policy) error {
	if slices.Contains(p.AllowExecCommands, "") {
		return usageErrorf("--allow-exec-plugin must name a command")
	}
	return nil
}
