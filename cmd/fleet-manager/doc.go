// Command fleet-manager runs a fleet of Kubernetes clusters from a hub.
//
// Usage:
//
//	fleet-manager [run] [flags]   run the manager against a hub (the default)
//	fleet-manager version         print the version, the commit and the Go version (also --version)
//
// run connects to the hub (--hub-kubeconfig, else the in-cluster config,
// else $KUBECONFIG and the default loading rules), registers every member
// whose kubeconfig Secret sits in the fleet namespace, and serves metrics
// and health probes. A member being down never fails /readyz. The
// --allow-* flags relax the kubeconfig policy; --multicluster-runtime-secrets,
// --capi-secrets and --argocd-secrets also register the Secrets of those
// tools.
//
// It logs with controller-runtime's zap logger (see the --zap-* flags);
// klog, used by client-go, goes to the same logger. The exit code is 0 on
// a clean stop, 1 on an error and 2 on bad usage.
//
// The demo is a program of its own, cmd/fleet-demo (`make demo`), so that
// this binary does not link envtest and the local API servers; a test
// checks that it does not.
package main
