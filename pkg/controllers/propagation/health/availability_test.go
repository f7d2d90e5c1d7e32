package health

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/cel-go/interpreter"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// memberCopyOf is a copy named web as its member holds it: of generation
// 2, with status unless status is nil.
func memberCopyOf(apiVersion, kind string, spec, status map[string]any) *unstructured.Unstructured {
	obj := map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"namespace": "team-a", "name": "web", "generation": int64(2)},
		"spec":     spec,
	}
	if status != nil {
		obj["status"] = status
	}
	return &unstructured.Unstructured{Object: obj}
}

// conditions are status conditions, each given as type, status, reason.
func conditions(typeStatusReason ...string) []any {
	var list []any
	for i := 0; i+2 < len(typeStatusReason); i += 3 {
		list = append(list, map[string]any{"type": typeStatusReason[i], "status": typeStatusReason[i+1], "reason": typeStatusReason[i+2]})
	}
	return list
}

func isAvailable() Availability { return Availability{State: Available} }

func notAvailableWith(message string) Availability {
	return Availability{State: NotAvailable, Message: message}
}

func TestAvailabilityOfBuiltInKinds(t *testing.T) {
	deployment := func(spec, status map[string]any) *unstructured.Unstructured {
		return memberCopyOf("apps/v1", "Deployment", spec, status)
	}
	statefulSet := func(spec, status map[string]any) *unstructured.Unstructured {
		return memberCopyOf("apps/v1", "StatefulSet", spec, status)
	}
	daemonSet := func(spec, status map[string]any) *unstructured.Unstructured {
		return memberCopyOf("apps/v1", "DaemonSet", spec, status)
	}
	job := func(status map[string]any) *unstructured.Unstructured {
		return memberCopyOf("batch/v1", "Job", map[string]any{}, status)
	}
	service := func(spec, status map[string]any) *unstructured.Unstructured {
		return memberCopyOf("v1", "Service", spec, status)
	}
	crd := func(status map[string]any) *unstructured.Unstructured {
		return memberCopyOf("apiextensions.k8s.io/v1", "CustomResourceDefinition", map[string]any{}, status)
	}
	pdb := func(status map[string]any) *unstructured.Unstructured {
		return memberCopyOf("policy/v1", "PodDisruptionBudget", map[string]any{}, status)
	}
	three := map[string]any{"replicas": int64(3)}
	rolling := func(partition any) map[string]any {
		spec := map[string]any{"replicas": int64(3), "updateStrategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{}}}
		if partition != nil {
			spec["updateStrategy"].(map[string]any)["rollingUpdate"] = map[string]any{"partition": partition}
		}
		return spec
	}
	withStatus := func(obj *unstructured.Unstructured, status any) *unstructured.Unstructured {
		obj.Object["status"] = status
		return obj
	}
	onDelete := map[string]any{"replicas": int64(3), "updateStrategy": map[string]any{"type": "OnDelete"}}
	notSeen := func(kind string) Availability {
		return notAvailableWith(kind + " web: the member's controller has not seen generation 2 yet")
	}

	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		want Availability
	}{
		{"Deployment rolled out", deployment(three, map[string]any{"observedGeneration": int64(2), "replicas": int64(3), "updatedReplicas": int64(3), "availableReplicas": int64(3)}), isAvailable()},
		{"Deployment scaled to zero", deployment(map[string]any{"replicas": int64(0)}, map[string]any{"observedGeneration": int64(2)}), isAvailable()},
		{"Deployment generation not seen", deployment(three, map[string]any{"observedGeneration": int64(1), "replicas": int64(3), "updatedReplicas": int64(3), "availableReplicas": int64(3)}), notSeen("Deployment")},
		{"Deployment without status", deployment(three, nil), notSeen("Deployment")},
		{"Deployment with a status not a map", withStatus(deployment(three, nil), "garbage"), notSeen("Deployment")},
		{"Deployment past its progress deadline", deployment(three, map[string]any{"observedGeneration": int64(2), "conditions": conditions("Available", "True", "MinimumReplicasAvailable", "Progressing", "False", "ProgressDeadlineExceeded")}), notAvailableWith("Deployment web: its rollout exceeded its progress deadline")},
		{"Deployment updating", deployment(three, map[string]any{"observedGeneration": int64(2), "replicas": int64(4), "updatedReplicas": int64(1), "availableReplicas": int64(3)}), notAvailableWith("Deployment web: 1 of 3 replicas updated")},
		{"Deployment of one replica by default", deployment(map[string]any{}, map[string]any{"observedGeneration": int64(2)}), notAvailableWith("Deployment web: 0 of 1 replicas updated")},
		{"Deployment terminating old replicas", deployment(three, map[string]any{"observedGeneration": int64(2), "replicas": int64(5), "updatedReplicas": int64(3), "availableReplicas": int64(3)}), notAvailableWith("Deployment web: 2 old replicas pending termination")},
		{"Deployment waiting for available replicas", deployment(three, map[string]any{"observedGeneration": int64(2), "replicas": int64(3), "updatedReplicas": int64(3), "availableReplicas": int64(1)}), notAvailableWith("Deployment web: 1 of 3 replicas available")},
		{"Deployment with mistyped fields", deployment(map[string]any{"replicas": "3"}, map[string]any{"observedGeneration": "2", "conditions": "none"}), notSeen("Deployment")},

		{"StatefulSet rolled out", statefulSet(rolling(int64(0)), map[string]any{"observedGeneration": int64(2), "replicas": int64(3), "readyReplicas": int64(3), "updatedReplicas": int64(3), "availableReplicas": int64(3)}), isAvailable()},
		{"StatefulSet generation not seen", statefulSet(rolling(int64(0)), map[string]any{"observedGeneration": int64(1), "readyReplicas": int64(3), "updatedReplicas": int64(3)}), notSeen("StatefulSet")},
		{"StatefulSet without status", statefulSet(rolling(int64(0)), nil), notSeen("StatefulSet")},
		{"StatefulSet waiting for ready replicas", statefulSet(rolling(int64(0)), map[string]any{"observedGeneration": int64(2), "readyReplicas": int64(1), "updatedReplicas": int64(3)}), notAvailableWith("StatefulSet web: 1 of 3 replicas ready")},
		{"StatefulSet partitioned update", statefulSet(rolling(int64(1)), map[string]any{"observedGeneration": int64(2), "readyReplicas": int64(3), "updatedReplicas": int64(1)}), notAvailableWith("StatefulSet web: 1 of 2 replicas updated")},
		{"StatefulSet partitioned update done", statefulSet(rolling(int64(1)), map[string]any{"observedGeneration": int64(2), "readyReplicas": int64(3), "updatedReplicas": int64(2), "updateRevision": "web-b", "currentRevision": "web-a"}), isAvailable()},
		{"StatefulSet rolling update", statefulSet(rolling(nil), map[string]any{"observedGeneration": int64(2), "readyReplicas": int64(3), "updatedReplicas": int64(2), "updateRevision": "web-7c9d6f8b5", "currentRevision": "web-5f4b8c6d7"}), notAvailableWith("StatefulSet web: rolling update to revision web-7c9d6f8b5: 2 of 3 replicas updated")},
		{"StatefulSet rolling update to an odd revision", statefulSet(rolling(nil), map[string]any{"observedGeneration": int64(2), "readyReplicas": int64(3), "updatedReplicas": int64(2), "updateRevision": "Web <b>!", "currentRevision": "web-5f4b8c6d7"}), notAvailableWith("StatefulSet web: rolling update: 2 of 3 replicas updated")},
		{"StatefulSet waiting for available replicas", statefulSet(rolling(int64(0)), map[string]any{"observedGeneration": int64(2), "readyReplicas": int64(3), "updatedReplicas": int64(3), "availableReplicas": int64(2)}), notAvailableWith("StatefulSet web: 2 of 3 replicas available")},
		{"StatefulSet of a member that counts no available replicas", statefulSet(rolling(int64(0)), map[string]any{"observedGeneration": int64(2), "readyReplicas": int64(3), "updatedReplicas": int64(3)}), isAvailable()},
		{"StatefulSet OnDelete ready", statefulSet(onDelete, map[string]any{"observedGeneration": int64(2), "readyReplicas": int64(3), "updatedReplicas": int64(0), "updateRevision": "web-b", "currentRevision": "web-a"}), isAvailable()},
		{"StatefulSet OnDelete not ready", statefulSet(onDelete, map[string]any{"observedGeneration": int64(2), "readyReplicas": int64(2)}), notAvailableWith("StatefulSet web: 2 of 3 replicas ready")},

		{"DaemonSet rolled out", daemonSet(map[string]any{}, map[string]any{"observedGeneration": int64(2), "desiredNumberScheduled": int64(3), "updatedNumberScheduled": int64(3), "numberAvailable": int64(3)}), isAvailable()},
		{"DaemonSet on no node", daemonSet(map[string]any{}, map[string]any{"observedGeneration": int64(2), "desiredNumberScheduled": int64(0)}), isAvailable()},
		{"DaemonSet generation not seen", daemonSet(map[string]any{}, map[string]any{"observedGeneration": int64(1), "desiredNumberScheduled": int64(0)}), notSeen("DaemonSet")},
		{"DaemonSet without status", daemonSet(map[string]any{}, nil), notSeen("DaemonSet")},
		{"DaemonSet updating", daemonSet(map[string]any{}, map[string]any{"observedGeneration": int64(2), "desiredNumberScheduled": int64(3), "updatedNumberScheduled": int64(1), "numberAvailable": int64(3)}), notAvailableWith("DaemonSet web: 1 of 3 pods updated")},
		{"DaemonSet waiting for available pods", daemonSet(map[string]any{}, map[string]any{"observedGeneration": int64(2), "desiredNumberScheduled": int64(3), "updatedNumberScheduled": int64(3), "numberAvailable": int64(2)}), notAvailableWith("DaemonSet web: 2 of 3 pods available")},
		{"DaemonSet OnDelete available", daemonSet(map[string]any{"updateStrategy": map[string]any{"type": "OnDelete"}}, map[string]any{"observedGeneration": int64(2), "desiredNumberScheduled": int64(3), "updatedNumberScheduled": int64(0), "numberAvailable": int64(3)}), isAvailable()},

		{"Job complete", job(map[string]any{"succeeded": int64(1), "conditions": conditions("SuccessCriteriaMet", "True", "CompletionsReached", "Complete", "True", "CompletionsReached")}), isAvailable()},
		{"Job failed", job(map[string]any{"conditions": conditions("Failed", "True", "BackoffLimitExceeded")}), notAvailableWith("Job web failed: BackoffLimitExceeded")},
		{"Job failed for a reason not the Job controller's", job(map[string]any{"conditions": conditions("Failed", "True", "token s3cr3t leaked")}), notAvailableWith("Job web failed")},
		{"Job running", job(map[string]any{"succeeded": int64(2), "conditions": conditions("Complete", "False", "")}), notAvailableWith("Job web: not complete yet (2 succeeded)")},
		{"Job without status", job(nil), notAvailableWith("Job web: not complete yet (0 succeeded)")},

		{"Service with a cluster IP", service(map[string]any{"type": "ClusterIP", "clusterIP": "10.0.0.7"}, map[string]any{"loadBalancer": map[string]any{}}), isAvailable()},
		{"Service of the default type", service(map[string]any{"clusterIP": "10.0.0.7"}, nil), isAvailable()},
		{"Service headless", service(map[string]any{"clusterIP": "None"}, nil), isAvailable()},
		{"Service NodePort without a cluster IP", service(map[string]any{"type": "NodePort"}, nil), notAvailableWith("Service web: no cluster IP allocated yet")},
		{"Service ExternalName", service(map[string]any{"type": "ExternalName", "externalName": "example.com"}, nil), isAvailable()},
		{"Service LoadBalancer with an ingress", service(map[string]any{"type": "LoadBalancer", "clusterIP": "10.0.0.7"}, map[string]any{"loadBalancer": map[string]any{"ingress": []any{map[string]any{"ip": "203.0.113.7"}}}}), isAvailable()},
		{"Service LoadBalancer waiting", service(map[string]any{"type": "LoadBalancer", "clusterIP": "10.0.0.7"}, map[string]any{"loadBalancer": map[string]any{}}), notAvailableWith("Service web: waiting for a load balancer ingress")},
		{"Service LoadBalancer without status", service(map[string]any{"type": "LoadBalancer", "clusterIP": "10.0.0.7"}, nil), notAvailableWith("Service web: waiting for a load balancer ingress")},

		{"CustomResourceDefinition Established", crd(map[string]any{"conditions": conditions("NamesAccepted", "True", "NoConflicts", "Established", "True", "InitialNamesAccepted")}), isAvailable()},
		{"CustomResourceDefinition not Established", crd(map[string]any{"conditions": conditions("NamesAccepted", "True", "NoConflicts", "Established", "False", "Installing")}), notAvailableWith("CustomResourceDefinition web: not Established yet")},
		{"CustomResourceDefinition without status", crd(nil), notAvailableWith("CustomResourceDefinition web: not Established yet")},
		{"CustomResourceDefinition whose names conflict", crd(map[string]any{"conditions": conditions("NamesAccepted", "False", "ListKindConflict", "Established", "True", "InitialNamesAccepted")}), notAvailableWith("CustomResourceDefinition web: its names were not accepted")},

		{"PodDisruptionBudget healthy", pdb(map[string]any{"observedGeneration": int64(2), "currentHealthy": int64(2), "desiredHealthy": int64(2)}), isAvailable()},
		{"PodDisruptionBudget unhealthy", pdb(map[string]any{"observedGeneration": int64(2), "currentHealthy": int64(1), "desiredHealthy": int64(2)}), notAvailableWith("PodDisruptionBudget web: 1 of 2 pods healthy")},
		{"PodDisruptionBudget generation not seen", pdb(map[string]any{"observedGeneration": int64(1), "currentHealthy": int64(2), "desiredHealthy": int64(2)}), notSeen("PodDisruptionBudget")},
		{"PodDisruptionBudget without status", pdb(nil), notSeen("PodDisruptionBudget")},

		{"kind without a rule", memberCopyOf("example.com/v1", "Widget", map[string]any{}, nil), Availability{State: NotTracked}},
		{"fleet kind", memberCopyOf("fleet.fleetkube.io/v1alpha1", "Propagation", map[string]any{}, nil), Availability{State: NotTracked}},
		{"kind of a rule in another group", memberCopyOf("example.com/v1", "Deployment", map[string]any{}, nil), Availability{State: NotTracked}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(tc.obj, nil); got != tc.want {
				t.Errorf("Of = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestAvailabilityOfMistypedStatusNeverPanics(t *testing.T) {
	for gk := range availabilityRules {
		for _, status := range []any{"garbage", int64(1), []any{"x"}, map[string]any{"conditions": []any{"x", int64(1), nil}, "observedGeneration": 2.5, "loadBalancer": "x"}} {
			obj := memberCopyOf(schema.GroupVersion{Group: gk.Group, Version: "v1"}.String(), gk.Kind, nil, nil)
			obj.Object["status"] = status
			obj.Object["spec"] = "garbage"
			_ = Of(obj, nil)
		}
	}
}

func TestAvailabilityOfDataKinds(t *testing.T) {
	for _, gk := range []schema.GroupKind{
		{Kind: "ConfigMap"}, {Kind: "Secret"}, {Kind: "ServiceAccount"}, {Kind: "Namespace"},
		{Kind: "ResourceQuota"}, {Kind: "LimitRange"}, {Kind: "Endpoints"},
		{Group: "rbac.authorization.k8s.io", Kind: "Role"}, {Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"},
		{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}, {Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"},
		{Group: "networking.k8s.io", Kind: "NetworkPolicy"}, {Group: "networking.k8s.io", Kind: "IngressClass"},
		{Group: "scheduling.k8s.io", Kind: "PriorityClass"}, {Group: "storage.k8s.io", Kind: "StorageClass"},
		{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"},
		{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"},
		{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"},
		{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"},
	} {
		obj := memberCopyOf(schema.GroupVersion{Group: gk.Group, Version: "v1"}.String(), gk.Kind, nil, nil)
		if got := Of(obj, nil); got != isAvailable() {
			t.Errorf("%v: Of = %+v, want available", gk, got)
		}
	}
}

func TestAvailableWhenDecides(t *testing.T) {
	widget := func(status map[string]any) *unstructured.Unstructured {
		return memberCopyOf("example.com/v1", "Widget", map[string]any{"key": "s3cr3t-value"}, status)
	}
	// Each level of the comprehension takes 16 times the one below.
	huge := "[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]"
	for _, tc := range []struct {
		name string
		rule string
		obj  *unstructured.Unstructured
		want Availability
	}{
		{"true", `self.status.phase == "Ready"`, widget(map[string]any{"phase": "Ready"}), isAvailable()},
		{"false", `self.status.phase == "Ready"`, widget(map[string]any{"phase": "Pending"}), notAvailableWith("Widget web: availableWhen is false")},
		{"a dynamic boolean", `self.status.ready`, widget(map[string]any{"ready": true}), isAvailable()},
		{"not a boolean when evaluated", `self.spec.key`, widget(nil), notAvailableWith("Widget web: availableWhen did not hold (not a boolean)")},
		{"a missing key", `self.status.phase == "Ready"`, widget(nil), notAvailableWith("Widget web: availableWhen did not hold (no such key)")},
		{"a missing key named by the member", `self.metadata.labels[self.spec.key] == "x"`, memberCopyOf("example.com/v1", "Widget", map[string]any{"key": "s3cr3t-value"}, nil), notAvailableWith("Widget web: availableWhen did not hold (no such key)")},
		{"a type mismatch", `self.spec.key > 1`, widget(nil), notAvailableWith("Widget web: availableWhen did not hold (no such overload)")},
		{"has and conditions", `has(self.status.conditions) && self.status.conditions.exists(c, c.type == "Ready" && c.status == "True")`, widget(map[string]any{"conditions": conditions("Ready", "True", "Done")}), isAvailable()},
		{"has without status", `has(self.status) && self.status.ready`, widget(nil), notAvailableWith("Widget web: availableWhen is false")},
		{"numbers of either type", `self.status.replicas >= 2.5 && self.status.ratio > 1`, widget(map[string]any{"replicas": int64(3), "ratio": 1.5}), isAvailable()},
		{"the strings library", `self.metadata.name.upperAscii().startsWith("WE")`, widget(nil), isAvailable()},
		{"the cost limit", huge + ".all(a, " + huge + ".all(b, " + huge + ".all(c, " + huge + ".all(d, a + b + c + d >= 0))))", widget(nil), notAvailableWith("Widget web: availableWhen did not hold (cost limit exceeded)")},
		{"a kind with a rule", `true`, memberCopyOf("apps/v1", "Deployment", map[string]any{}, nil), isAvailable()},
		{"a kind with a rule held back", `self.spec.paused == false`, memberCopyOf("apps/v1", "Deployment", map[string]any{"paused": true}, map[string]any{"observedGeneration": int64(2)}), notAvailableWith("Deployment web: availableWhen is false")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule, err := Compile(tc.rule)
			if err != nil {
				t.Fatalf("Compile(%q): %v", tc.rule, err)
			}
			// Each case names a class of failure, not the backstop: on
			// two loaded cores under -race, reaching the cost limit can
			// take longer than availableWhenTimeout.
			rule.timeout = time.Minute
			got := Of(tc.obj, rule)
			if got != tc.want {
				t.Errorf("Of = %+v, want %+v", got, tc.want)
			}
			if strings.Contains(got.Message, "s3cr3t") {
				t.Errorf("the message %q tells a value of the member", got.Message)
			}
		})
	}
}

func TestAvailableWhenFailureTellsOnlyItsClass(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{interpreter.EvalCancelledError{Cause: interpreter.CostLimitExceeded, Message: "operation cancelled: actual cost limit exceeded"}, "cost limit exceeded"},
		{fmt.Errorf("%w: %w", interpreter.InterruptError{}, context.DeadlineExceeded), "timed out"},
		{errors.New("no such key: s3cr3t"), "no such key"},
		{errors.New("internal error: s3cr3t"), "evaluation error"},
	} {
		if got := evaluationFailure(tc.err); got != tc.want {
			t.Errorf("evaluationFailure(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestCompileAvailableWhenRefuses(t *testing.T) {
	for _, tc := range []struct {
		rule, want string
	}{
		{`1 + 2`, "availableWhen must be a boolean expression, not int"},
		{`"Ready"`, "availableWhen must be a boolean expression, not string"},
		{`self.status.conditions.map(c, c.type)`, "availableWhen must be a boolean expression, not list(dyn)"},
		{`self.status.phase ==`, "Syntax error"},
		{`status.ready`, "undeclared reference to 'status'"},
		{`self.status.size() > "1" + 1`, "found no matching overload"},
	} {
		rule, err := Compile(tc.rule)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%q) = %v, %v; want an error saying %q", tc.rule, rule, err, tc.want)
		}
	}
}

func TestCompileAvailableWhenCachesBounded(t *testing.T) {
	a, _ := Compile(`self.status.ready == true`)
	if b, _ := Compile(`self.status.ready == true`); a != b {
		t.Error("the same expression was compiled twice")
	}
	_, errA := Compile(`1 + 2`)
	if _, errB := Compile(`1 + 2`); errA == nil || errA != errB {
		t.Errorf("an expression that does not compile was compiled twice: %v, %v", errA, errB)
	}
	for i := range 2 * maxCompiledAvailableWhen {
		if _, err := Compile(fmt.Sprintf("self.status.replicas == %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	compiledAvailableWhens.Lock()
	defer compiledAvailableWhens.Unlock()
	if n := len(compiledAvailableWhens.byExpression); n > maxCompiledAvailableWhen {
		t.Errorf("%d compiled rules kept, want at most %d", n, maxCompiledAvailableWhen)
	}
}

func TestAvailableWhenIsSafeForConcurrentUse(t *testing.T) {
	obj := memberCopyOf("example.com/v1", "Widget", map[string]any{}, map[string]any{"replicas": int64(3)})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				rule, err := Compile(fmt.Sprintf("self.status.replicas >= %d", (g+i)%6))
				if err != nil {
					t.Error(err)
					return
				}
				want := Available
				if (g+i)%6 > 3 {
					want = NotAvailable
				}
				if got := Of(obj, rule); got.State != want {
					t.Errorf("Of = %+v, want state %v", got, want)
				}
			}
		})
	}
	wg.Wait()
}

// bigCopy is a Widget whose spec holds a string s of maxCopySize
// characters, a list items of maxCopySize/8 numbers and name's length in
// letters, the worst a tenant's copy may bring to its own rule.
func bigCopy() *unstructured.Unstructured {
	items := make([]any, maxCopySize/8)
	for i := range items {
		items[i] = int64(i)
	}
	return memberCopyOf("example.com/v1", "Widget", map[string]any{"s": strings.Repeat("a", maxCopySize), "items": items}, map[string]any{"conditions": conditions("Ready", "True", "Done")})
}

func TestAvailableWhenRefusesWhatCouldGrow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, rule, want string
	}{
		{"the reproduced rule", `self.metadata.name` + strings.Repeat(`.replace('', 'xxxxxxxxxx')`, 8) + `.size() > 0`, "one of its calls could make a string or list of"},
		{"one replacement around every character", `self.metadata.name.replace('', 'xxxxxxxxxx') != ''`, "one of its calls could make"},
		{"a replacement from the copy", `self.metadata.name.replace('', self.metadata.namespace) == ''`, "one of its calls could make"},
		{"repetition through join", `[self.spec.s, self.spec.s, self.spec.s].join('') != ''`, "one of its calls could make"},
		{"repetition through join of a comprehension", `self.spec.items.map(x, self.spec.s).join('').size() > 0`, "one of its calls could make a string or list of"},
		{"format", `'%s'.format([self.spec.items.map(x, self.spec.s)]) != ''`, "of no bound"},
		{"list concatenation in a comprehension", `self.spec.items.map(x, self.spec.items + self.spec.items).size() > 0`, "its estimated cost"},
		{"list concatenation in nested comprehensions", `self.spec.items.all(x, self.spec.items.map(y, [x] + [y]).size() > 0)`, "its estimated cost"},
		{"concatenation", `self.metadata.name + self.metadata.name + self.metadata.name != ''`, "one of its calls could make"},
		{"concatenation in a comprehension", `self.spec.items.all(x, self.spec.s + self.spec.s != '')`, "its estimated cost"},
		{"split on a string of the copy", `self.spec.s.split('').size() > 0`, "one of its calls could make"},
		{"a string function on each element", `self.status.conditions.all(c, c.status.lowerAscii() == 'true')`, "its estimated cost"},
		{"join of a comprehension through dyn", `dyn(self.data.map(k, self.data.big)).join('') == ''`, "one of its calls could make"},
		{"join of a literal list through dyn", `dyn([self.data.big, self.data.big, self.data.big]).join('') == ''`, "one of its calls could make"},
		{"quote", `strings.quote(self.data.big) == ''`, "one of its calls could make"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rule, err := Compile(tc.rule)
			var rerr *RuleError
			if !errors.As(err, &rerr) || rerr.Reason != "AvailabilityRuleRefused" || !strings.Contains(rerr.Message, tc.want) || !strings.Contains(rerr.Message, "over the limit of") && !strings.Contains(rerr.Message, "exceeds the limit of") {
				t.Fatalf("Compile = %v, %v; want it refused, AvailabilityRuleRefused, saying %q and the limit", rule, err, tc.want)
			}
		})
	}
}

// TestAvailableWhenAllocationIsBounded evaluates, over the biggest copy,
// the rules that could allocate the most and are not refused, and bounds
// what each evaluation allocates.
func TestAvailableWhenAllocationIsBounded(t *testing.T) {
	obj := bigCopy()
	// stopped is an evaluation cut at its cost, or, on a slow machine, at
	// its time, whichever comes first.
	stopped := notAvailableWith("stopped")
	// A string of the copy turned to runes takes four times its size.
	const bound = 32 << 20
	for _, tc := range []struct {
		rule string
		want Availability
	}{
		{`'a,b'.split(',').size() == 2`, isAvailable()},
		{`self.spec.s.replace('a', 'bb').size() > 0`, stopped},
		{`(self.spec.s + self.spec.s).size() > 0`, stopped},
		{`self.spec.s.upperAscii().size() > 0`, stopped},
		{`self.spec.items.map(x, self.spec.items).size() > 0`, stopped},
		{`self.spec.items.map(x, [x, x, x, x]).size() > 0`, stopped},
		{`self.spec.items.filter(x, x > 0).size() > 0`, stopped},
		{`self.spec.s.lowerAscii() + self.spec.s.upperAscii() != ''`, stopped},
		{`self.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')`, isAvailable()},
	} {
		rule, err := Compile(tc.rule)
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.rule, err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		got := Of(obj, rule)
		runtime.ReadMemStats(&after)
		if tc.want == stopped && (got.Message == "Widget web: availableWhen did not hold (cost limit exceeded)" || got.Message == "Widget web: availableWhen did not hold (timed out)") {
			got = stopped
		}
		if got != tc.want {
			t.Errorf("%s: Of = %+v, want %+v", tc.rule, got, tc.want)
		}
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d KiB allocated", tc.rule, allocated>>10)
		if allocated > bound {
			t.Errorf("%s allocated %d MiB, want at most %d", tc.rule, allocated>>20, bound>>20)
		}
	}
}
