// Command fleet-manager runs a fleet of Kubernetes clusters from a hub, and
// registers its members.
//
// Usage:
//
//	fleet-manager [run] [flags]           run the manager against a hub (the default)
//	fleet-manager register NAME [flags]   give the manager least-privilege, self-renewing access to a member
//	fleet-manager unregister NAME         remove a member's registration (--cleanup: and its access and copies)
//	fleet-manager get members|propagations  list members or Propagations, kubectl-style
//	fleet-manager status NAME             one member's state, conditions, transitions and credentials
//	fleet-manager status propagation NAME one Propagation's counts, rollout, conditions and members not applied
//	fleet-manager rollout status|pause|resume|undo|history TYPE/NAME   a Propagation's rollout, kubectl rollout-style
//	fleet-manager cordon|uncordon|drain NAME...   take members out of rollouts (drain: and remove their copies), and back
//	fleet-manager check-kubeconfig FILE   say whether the manager's policy accepts a kubeconfig
//	fleet-manager demo                    run fleet-demo, a local hub and two members
//	fleet-manager version                 print the version (also --version)
//	fleet-manager completion SHELL        print a shell completion script
//
// The commands are cobra commands with pflag flags. Every one reaches the
// hub through --hub-kubeconfig and --hub-context, else $KUBECONFIG and the
// default loading rules, as kubectl does; run tries the in-cluster config
// first.
//
// run registers every member whose kubeconfig Secret sits in the fleet
// namespace, keeps a MemberCluster per member, renews members' service
// account tokens, and serves metrics and health probes. It logs with
// controller-runtime's zap logger (see the --zap-* flags); klog, used by
// client-go, goes to the same logger.
//
// Named kubectl-fleet, the binary is the kubectl plugin `kubectl fleet`;
// named kubectl_complete-fleet, it completes that plugin's arguments.
//
// The exit code is 0 on success, 1 on an error, which is printed as one
// line, and 2 on bad usage.
//
// The demo is a program of its own, cmd/fleet-demo (`make demo`), so that
// this binary does not link envtest and the local API servers; a test
// checks that it does not.
package main
