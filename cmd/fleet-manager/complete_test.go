package main

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/utils/clock"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// TestCompletion completes member and Propagation names from the hub, as
// kubectl completes resource names, rollout's TYPE/NAME, and the values
// of -o and -n.
func TestCompletion(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)
	for _, name := range []string{"comp-east", "comp-west", "comp-north"} {
		createMember(t, c, newMember(name, "comp", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: name, Format: fleetv1alpha1.FormatNative}))
	}
	createNamespace(t, c, "comp-team")
	configMap := []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}}
	for _, name := range []string{"web", "api", "worker"} {
		createPropagation(t, c, newPropagation("comp-team", name, fleetv1alpha1.PropagationSpec{Resources: configMap}))
	}

	var got strings.Builder
	for _, args := range []string{
		"get members comp-",
		"get mc comp-east comp-",
		"status comp-w",
		"status comp-west ",
		"status m",
		"status member comp-n",
		"get members -o ",
		"status comp-east -o j",
		"get propagations -n comp-team w",
		"get prop -n comp-team api ",
		"status propagation -n comp-team ",
		"get propagations -n comp-t",
		"rollout status ",
		"rollout undo -n comp-team propagation/w",
		"rollout history -n comp-team prop ",
		"rollout pause -n comp-team prop/web ",
		"cordon comp-east comp-",
		"drain comp-n",
	} {
		// The last word is the one completed: "" after a space.
		words := strings.Split(args, " ")
		res := runCLI(t, nil, clock.RealClock{}, append([]string{"__complete", hubFlag}, words...)...)
		if res.code != 0 {
			t.Fatalf("%s: %+v", args, res)
		}
		fmt.Fprintf(&got, "$ %s\n%s%s", args, res.stdout, res.stderr)
	}
	checkGolden(t, "complete.golden", got.String())

	// A hub that cannot be reached completes nothing, and says nothing.
	res := runCLI(t, nil, clock.RealClock{}, "__complete", "get", "members", "--hub-kubeconfig=/nonexistent", "")
	if want := (cliResult{stdout: ":4\n", stderr: "Completion ended with directive: ShellCompDirectiveNoFileComp\n"}); res != want {
		t.Errorf("unreachable hub: got %+v, want %+v", res, want)
	}
}

// TestUnregisterAndGrantsCompleteMembers: unregister completes its one
// member name, grants sync every member's, not file names.
func TestUnregisterAndGrantsCompleteMembers(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)
	for _, name := range []string{"unreg-east", "unreg-west"} {
		createMember(t, c, newMember(name, "unreg", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: name, Format: fleetv1alpha1.FormatNative}))
	}
	for args, want := range map[string]string{
		"unregister unreg-":             "unreg-east\nunreg-west\n:4\n",
		"unregister unreg-east ":        ":4\n",
		"grants sync unreg-east unreg-": "unreg-west\n:4\n",
	} {
		res := runEnroll(t, append([]string{"__complete", hubFlag}, strings.Split(args, " ")...)...)
		if res.code != 0 || !strings.HasPrefix(res.stdout, want) {
			t.Errorf("__complete %s: exit %d, stdout %q, want %q first", args, res.code, res.stdout, want)
		}
	}
}
