package health

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/cel/library"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// Availability is whether a copy in a member is available.
type Availability struct {
	State State
	// Message says, in the manager's words, what a copy that is not
	// available waits for, naming it: "Deployment web: 1 of 3 replicas
	// available". Empty when available or not tracked.
	Message string
}

// State is a copy's availability.
type State int

const (
	// Available: the copy is available.
	Available State = iota
	// NotAvailable: not yet, Message says why.
	NotAvailable
	// NotTracked: no rule for its kind and no availableWhen; counted as
	// available.
	NotTracked
)

// Of says whether obj, a copy as its member holds it (with
// status), is available: by rule when rule is not nil, else by its kind's
// built-in rule.
func Of(obj *unstructured.Unstructured, rule *Rule) Availability {
	if rule != nil {
		return rule.availability(obj)
	}
	if builtIn, ok := availabilityRules[obj.GroupVersionKind().GroupKind()]; ok {
		return builtIn(obj)
	}
	return Availability{State: NotTracked}
}

// availabilityRules are the built-in rules, by kind. A kind without one is
// not tracked unless its resource has availableWhen.
var availabilityRules = map[schema.GroupKind]func(*unstructured.Unstructured) Availability{
	{Group: "apps", Kind: "Deployment"}:                               deploymentAvailability,
	{Group: "apps", Kind: "StatefulSet"}:                              statefulSetAvailability,
	{Group: "apps", Kind: "DaemonSet"}:                                daemonSetAvailability,
	{Group: "batch", Kind: "Job"}:                                     jobAvailability,
	{Kind: "Service"}:                                                 serviceAvailability,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}: crdAvailability,
	{Group: "policy", Kind: "PodDisruptionBudget"}:                    podDisruptionBudgetAvailability,

	// Data: available once it exists.
	{Kind: "ConfigMap"}:      dataAvailability,
	{Kind: "Secret"}:         dataAvailability,
	{Kind: "ServiceAccount"}: dataAvailability,
	{Kind: "Namespace"}:      dataAvailability,
	{Kind: "ResourceQuota"}:  dataAvailability,
	{Kind: "LimitRange"}:     dataAvailability,
	{Kind: "Endpoints"}:      dataAvailability,
	{Group: "rbac.authorization.k8s.io", Kind: "Role"}:                                dataAvailability,
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:                         dataAvailability,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:                         dataAvailability,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:                  dataAvailability,
	{Group: "networking.k8s.io", Kind: "NetworkPolicy"}:                               dataAvailability,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:                                dataAvailability,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                               dataAvailability,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                                   dataAvailability,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   dataAvailability,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     dataAvailability,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        dataAvailability,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: dataAvailability,
}

// dataAvailability: data is available once it exists.
func dataAvailability(*unstructured.Unstructured) Availability { return Availability{State: Available} }

// deploymentAvailability is kubectl rollout status's rule.
func deploymentAvailability(obj *unstructured.Unstructured) Availability {
	if a, waiting := generationNotSeen(obj); waiting {
		return a
	}
	if _, reason := conditionOf(obj, "Progressing"); reason == "ProgressDeadlineExceeded" {
		return copyNotAvailable(obj, ": its rollout exceeded its progress deadline")
	}
	replicas := specReplicas(obj)
	updated := statusCount(obj, "updatedReplicas")
	total := statusCount(obj, "replicas")
	availableReplicas := statusCount(obj, "availableReplicas")
	switch {
	case updated < replicas:
		return copyNotAvailable(obj, ": %d of %d replicas updated", updated, replicas)
	case total > updated:
		return copyNotAvailable(obj, ": %d old replicas pending termination", total-updated)
	case availableReplicas < updated:
		return copyNotAvailable(obj, ": %d of %d replicas available", availableReplicas, updated)
	}
	return Availability{State: Available}
}

// statefulSetAvailability is kubectl rollout status's rule, which has none
// for OnDelete: there ready replicas tell. Available replicas tell too, by
// a member that counts them.
func statefulSetAvailability(obj *unstructured.Unstructured) Availability {
	if a, waiting := generationNotSeen(obj); waiting {
		return a
	}
	replicas := specReplicas(obj)
	if ready := statusCount(obj, "readyReplicas"); ready < replicas {
		return copyNotAvailable(obj, ": %d of %d replicas ready", ready, replicas)
	}
	if strategy, _, _ := unstructured.NestedString(obj.Object, "spec", "updateStrategy", "type"); strategy != "OnDelete" {
		updated := statusCount(obj, "updatedReplicas")
		updateRevision, _, _ := unstructured.NestedString(obj.Object, "status", "updateRevision")
		currentRevision, _, _ := unstructured.NestedString(obj.Object, "status", "currentRevision")
		if partition, ok := integerAt(obj, "spec", "updateStrategy", "rollingUpdate", "partition"); ok {
			if updated < replicas-partition {
				return copyNotAvailable(obj, ": %d of %d replicas updated", updated, replicas-partition)
			}
		} else if updateRevision != currentRevision {
			if !revisionName.MatchString(updateRevision) {
				return copyNotAvailable(obj, ": rolling update: %d of %d replicas updated", updated, replicas)
			}
			return copyNotAvailable(obj, ": rolling update to revision %s: %d of %d replicas updated", updateRevision, updated, replicas)
		}
	}
	if availableReplicas, ok := integerAt(obj, "status", "availableReplicas"); ok && availableReplicas < replicas {
		return copyNotAvailable(obj, ": %d of %d replicas available", availableReplicas, replicas)
	}
	return Availability{State: Available}
}

// camelCase matches a reason of the Job controller's: only such a reason
// is shown.
var camelCase = regexp.MustCompile(`^[A-Z][A-Za-z]{0,63}$`)

// revisionName matches a ControllerRevision's name, which a StatefulSet's
// status names: only such a name is shown.
var revisionName = regexp.MustCompile(`^[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?$`)

// daemonSetAvailability is kubectl rollout status's rule, which has none
// for OnDelete: there available pods tell.
func daemonSetAvailability(obj *unstructured.Unstructured) Availability {
	if a, waiting := generationNotSeen(obj); waiting {
		return a
	}
	desired := statusCount(obj, "desiredNumberScheduled")
	if strategy, _, _ := unstructured.NestedString(obj.Object, "spec", "updateStrategy", "type"); strategy != "OnDelete" {
		if updated := statusCount(obj, "updatedNumberScheduled"); updated < desired {
			return copyNotAvailable(obj, ": %d of %d pods updated", updated, desired)
		}
	}
	if availablePods := statusCount(obj, "numberAvailable"); availablePods < desired {
		return copyNotAvailable(obj, ": %d of %d pods available", availablePods, desired)
	}
	return Availability{State: Available}
}

// jobAvailability: a Job is available once complete.
func jobAvailability(obj *unstructured.Unstructured) Availability {
	if status, _ := conditionOf(obj, "Complete"); status == "True" {
		return Availability{State: Available}
	}
	if status, reason := conditionOf(obj, "Failed"); status == "True" {
		if camelCase.MatchString(reason) {
			return copyNotAvailable(obj, " failed: %s", reason)
		}
		return copyNotAvailable(obj, " failed")
	}
	return copyNotAvailable(obj, ": not complete yet (%d succeeded)", statusCount(obj, "succeeded"))
}

// serviceAvailability: a Service is available once the member gave it an
// address. Its backends are workloads, tracked by their own rules.
func serviceAvailability(obj *unstructured.Unstructured) Availability {
	switch serviceType, _, _ := unstructured.NestedString(obj.Object, "spec", "type"); serviceType {
	case "ExternalName":
		return Availability{State: Available}
	case "LoadBalancer":
		ingress, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "status", "loadBalancer", "ingress")
		if list, _ := ingress.([]any); len(list) > 0 {
			return Availability{State: Available}
		}
		return copyNotAvailable(obj, ": waiting for a load balancer ingress")
	}
	if ip, _, _ := unstructured.NestedString(obj.Object, "spec", "clusterIP"); ip != "" {
		return Availability{State: Available} // None, for a headless Service, too
	}
	return copyNotAvailable(obj, ": no cluster IP allocated yet")
}

// crdAvailability: a CustomResourceDefinition is available once
// Established, its names accepted.
func crdAvailability(obj *unstructured.Unstructured) Availability {
	if namesAccepted, _ := conditionOf(obj, "NamesAccepted"); namesAccepted == "False" {
		return copyNotAvailable(obj, ": its names were not accepted")
	}
	if established, _ := conditionOf(obj, "Established"); established != "True" {
		return copyNotAvailable(obj, ": not Established yet")
	}
	return Availability{State: Available}
}

// podDisruptionBudgetAvailability: a PodDisruptionBudget is available once
// as many pods are healthy as it wants.
func podDisruptionBudgetAvailability(obj *unstructured.Unstructured) Availability {
	if a, waiting := generationNotSeen(obj); waiting {
		return a
	}
	if healthy, desired := statusCount(obj, "currentHealthy"), statusCount(obj, "desiredHealthy"); healthy < desired {
		return copyNotAvailable(obj, ": %d of %d pods healthy", healthy, desired)
	}
	return Availability{State: Available}
}

// generationNotSeen says why obj is not available while its member's
// controller has not seen its generation: a copy without status has not
// been seen.
func generationNotSeen(obj *unstructured.Unstructured) (Availability, bool) {
	generation, _ := integerAt(obj, "metadata", "generation")
	if observed, ok := integerAt(obj, "status", "observedGeneration"); ok && observed >= generation {
		return Availability{}, false
	}
	return copyNotAvailable(obj, ": the member's controller has not seen generation %d yet", generation), true
}

// copyNotAvailable is obj not available, the message naming it, then saying
// format.
func copyNotAvailable(obj *unstructured.Unstructured, format string, args ...any) Availability {
	return Availability{State: NotAvailable, Message: obj.GetKind() + " " + obj.GetName() + fmt.Sprintf(format, args...)}
}

// specReplicas is obj's spec.replicas, 1 when unset.
func specReplicas(obj *unstructured.Unstructured) int64 {
	if n, ok := integerAt(obj, "spec", "replicas"); ok {
		return n
	}
	return 1
}

// statusCount is obj's status field of that name, 0 when unset.
func statusCount(obj *unstructured.Unstructured, field string) int64 {
	n, _ := integerAt(obj, "status", field)
	return n
}

// integerAt is obj's integer at path, if it has one there.
func integerAt(obj *unstructured.Unstructured, path ...string) (int64, bool) {
	v, _, _ := unstructured.NestedFieldNoCopy(obj.Object, path...)
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case int:
		return int64(n), true
	case float64:
		return int64(n), n == float64(int64(n))
	}
	return 0, false
}

// conditionOf is the status and reason of obj's condition of type
// conditionType, empty when it has none.
func conditionOf(obj *unstructured.Unstructured, conditionType string) (status, reason string) {
	conditions, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "status", "conditions")
	list, _ := conditions.([]any)
	for _, c := range list {
		c, _ := c.(map[string]any)
		if t, _, _ := unstructured.NestedString(c, "type"); t == conditionType {
			status, _, _ = unstructured.NestedString(c, "status")
			reason, _, _ = unstructured.NestedString(c, "reason")
			return status, reason
		}
	}
	return "", ""
}

// Rule is a compiled CEL availability rule
// (ResourceSelector.AvailableWhen). It is safe for concurrent use.
type Rule struct {
	program cel.Program
	// timeout bounds one evaluation: availableWhenTimeout.
	timeout time.Duration
}

const (
	// maxCopySize bounds a copy, and so every string, list and map in it,
	// as the rules are estimated: 1.5 MiB, etcd's default request limit,
	// which bounds every object a member stores.
	maxCopySize = 1536 * 1024
	// availableWhenEstimateLimit bounds a rule's cost as estimated when it
	// is compiled, for any copy of up to maxCopySize: a few passes over a
	// list of the copy fit (one over conditions is estimated at 13 million),
	// a pass nested in another, or a string function called on each
	// element, do not.
	availableWhenEstimateLimit = 50_000_000
	// maxCallResult bounds, when a rule is compiled, the size (characters
	// or elements) of what any one call of it may make, for any copy of up
	// to maxCopySize. The cost limit is checked between calls and cannot
	// cut one short: this bounds the last call.
	maxCallResult = 2 * maxCopySize
	// availableWhenCostLimit bounds an evaluation's cost, in CEL's units,
	// each call that makes a string, list or map charged its size too: it
	// bounds what the evaluation allocates before its last call, and its
	// time, to a few tens of milliseconds of CPU. A rule over a copy's
	// conditions costs tens.
	availableWhenCostLimit = 100_000
	// availableWhenTimeout bounds an evaluation's time, as a backstop to
	// the cost limit: it is checked between iterations of a loop.
	availableWhenTimeout = time.Second
	// maxCompiledAvailableWhen bounds the compiled rules kept.
	maxCompiledAvailableWhen = 256
)

// compiledAvailableWhen is what compiling an expression gave.
type compiledAvailableWhen struct {
	rule *Rule
	err  error
}

// compiledAvailableWhens caches compiled rules by expression text, as
// every member reconcile asks; at most maxCompiledAvailableWhen, evicted
// arbitrarily.
var compiledAvailableWhens = struct {
	sync.Mutex
	byExpression map[string]compiledAvailableWhen
}{byExpression: map[string]compiledAvailableWhen{}}

// availableWhenEnv is the CEL environment of availableWhen: the copy as
// self, and the libraries of cel-go that Kubernetes enables for CRD
// validation rules, at Kubernetes' versions; their costs are estimated and
// tracked by availableWhenCosts.
var availableWhenEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("self", cel.DynType),
		cel.HomogeneousAggregateLiterals(),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(ext.StringsVersion(2)),
		ext.Sets(),
	)
})

// Compile compiles expr, a CEL expression over the copy as
// self, of type bool (or dyn, such as self.status.ready, checked when
// evaluated). An error names the problem in CEL's words; a rule that
// compiles but could cost more than the manager allows is refused, a
// *RuleError of reason AvailabilityRuleRefused naming the cost and the
// limit. It is safe for concurrent use; a rule and an error alike are
// cached.
func Compile(expr string) (*Rule, error) {
	cache := &compiledAvailableWhens
	cache.Lock()
	c, ok := cache.byExpression[expr]
	cache.Unlock()
	if ok {
		return c.rule, c.err
	}
	c.rule, c.err = newRule(expr)
	cache.Lock()
	defer cache.Unlock()
	if len(cache.byExpression) >= maxCompiledAvailableWhen {
		for k := range cache.byExpression {
			delete(cache.byExpression, k)
			break
		}
	}
	cache.byExpression[expr] = c
	return c.rule, c.err
}

// newRule compiles expr, uncached.
func newRule(expr string) (*Rule, error) {
	env, err := availableWhenEnv()
	if err != nil {
		return nil, err
	}
	ast, issues := env.Compile(expr)
	if err := issues.Err(); err != nil {
		return nil, err
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("availableWhen must be a boolean expression, not %s", t)
	}
	costs := newRuleCosts()
	estimate, err := env.EstimateCost(ast, costs)
	if err != nil {
		return nil, err
	}
	switch {
	case costs.largestResult > maxCallResult:
		return nil, ruleRefused("one of its calls could make a string or list of %s characters or elements, over the limit of %d, for a copy of up to 1.5 MiB", bound(costs.largestResult), uint64(maxCallResult))
	case estimate.Max > availableWhenEstimateLimit:
		return nil, ruleRefused("its estimated cost, %s, exceeds the limit of %d, for a copy of up to 1.5 MiB", bound(estimate.Max), uint64(availableWhenEstimateLimit))
	}
	program, err := env.Program(ast,
		cel.CostTracking(&availableWhenCosts{}),
		cel.CostLimit(availableWhenCostLimit),
		cel.InterruptCheckFrequency(100),
	)
	if err != nil {
		return nil, err
	}
	return &Rule{program: program, timeout: availableWhenTimeout}, nil
}

// RuleError is why an availableWhen cannot be used: Reason is
// InvalidAvailableWhen (it does not compile) or AvailabilityRuleRefused
// (it could cost too much), Message says why in the manager's words.
type RuleError struct{ Reason, Message string }

func (e *RuleError) Error() string { return e.Message }

// ruleRefused is why a rule that compiles is refused.
func ruleRefused(format string, args ...any) *RuleError {
	return &RuleError{Reason: fleetv1alpha1.ReasonAvailabilityRuleRefused, Message: "refused: " + fmt.Sprintf(format, args...)}
}

// bound is n, an estimate, in words: "no bound" when CEL found none.
func bound(n uint64) string {
	if n == math.MaxUint64 {
		return "no bound"
	}
	return strconv.FormatUint(n, 10)
}

// FirstUnusableRule is why a resource's availableWhen cannot be used,
// of the first such resource: it does not compile (InvalidAvailableWhen)
// or is refused (AvailabilityRuleRefused). Nil if every rule can be used.
func FirstUnusableRule(resources []fleetv1alpha1.ResourceSelector) *RuleError {
	for _, sel := range resources {
		if sel.AvailableWhen == "" {
			continue
		}
		if _, err := Compile(sel.AvailableWhen); err != nil {
			return UnusableRule(sel.Kind, err)
		}
	}
	return nil
}

// UnusableRule is err, compiling the availableWhen of a resource
// of kind, with its reason.
func UnusableRule(kind string, err error) *RuleError {
	reason := fleetv1alpha1.ReasonInvalidAvailableWhen
	if kerr := (*RuleError)(nil); errors.As(err, &kerr) {
		reason = kerr.Reason
	}
	return &RuleError{Reason: reason, Message: fmt.Sprintf("the availableWhen of %s: %v", kind, err)}
}

// availableWhenCosts estimates a rule's cost when it is compiled, and
// tracks it when it is evaluated, as Kubernetes does for CRD validation
// rules (library.CostEstimator), with each call that makes a string, list
// or map charged its size as well, so that cost bounds allocation. Its
// estimates take every value of self to be at most maxCopySize, and
// record in largestResult the largest result a call may make: format's
// has no bound. Tracking reads no field: one value serves every
// evaluation.
type availableWhenCosts struct {
	kubernetes    library.CostEstimator
	largestResult uint64
}

// newRuleCosts is an availableWhenCosts for one estimate.
func newRuleCosts() *availableWhenCosts {
	c := &availableWhenCosts{}
	c.kubernetes.SizeEstimator = c
	return c
}

// EstimateSize bounds what self holds; nil leaves other values to CEL.
func (c *availableWhenCosts) EstimateSize(node checker.AstNode) *checker.SizeEstimate {
	if path := node.Path(); len(path) > 0 && path[0] == "self" {
		return &checker.SizeEstimate{Min: 0, Max: maxCopySize}
	}
	return nil
}

// EstimateCallCost is Kubernetes' estimate, plus the size of the result;
// for a concatenation, whose operands are dyn when they come from self
// and escape CEL's own estimate, the size of the result.
func (c *availableWhenCosts) EstimateCallCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	var est *checker.CallEstimate
	switch function {
	case "format":
		c.largestResult = math.MaxUint64
		return nil
	case operators.Add:
		if len(args) != 2 {
			return nil
		}
		size := c.sizeOf(args[0]).Add(c.sizeOf(args[1]))
		est = &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: 1}, ResultSize: &size}
	default:
		est = c.kubernetes.EstimateCallCost(function, overloadID, target, args)
		if allocating[function] && (est == nil || est.ResultSize == nil) {
			// A call that makes a string or list CEL cannot size.
			c.largestResult = math.MaxUint64
			return est
		}
		if est == nil || est.ResultSize == nil {
			return est
		}
		if function == "join" && target != nil {
			// Each element may be a string of the copy, whatever CEL
			// estimates of it (nothing, through dyn).
			size := checker.SizeEstimate{Max: saturatingProduct(c.sizeOf(*target).Max, maxCopySize)}
			est.ResultSize = &size
		}
	}
	largest := est.ResultSize.Max
	if function == "split" { // the one call here that makes a list
		largest = saturatingProduct(largest, listEntryBytes)
	}
	c.largestResult = max(c.largestResult, largest)
	est.CostEstimate = est.CostEstimate.Add(checker.CostEstimate(*est.ResultSize))
	return est
}

// allocating are the functions of availableWhen's environment that make
// a string or list: one whose result CEL cannot size is unbounded.
var allocating = map[string]bool{
	"charAt": true, "join": true, "lowerAscii": true, "quote": true, "strings.quote": true, "replace": true,
	"split": true, "substring": true, "trim": true, "upperAscii": true, "reverse": true, "format": true,
	"string": true, "bytes": true,
}

// listEntryBytes is what an entry of a list a call makes takes at least:
// a string's header.
const listEntryBytes = 16

func saturatingProduct(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}

// sizeOf is the size of node as estimated: unbounded if unknown.
func (c *availableWhenCosts) sizeOf(node checker.AstNode) checker.SizeEstimate {
	if size := node.ComputedSize(); size != nil {
		return *size
	}
	if size := c.EstimateSize(node); size != nil {
		return *size
	}
	return checker.SizeEstimate{Min: 0, Max: math.MaxUint64}
}

// CallCost is Kubernetes' cost of a call, plus the size of its result;
// a concatenation's is the size of the string it makes.
func (c *availableWhenCosts) CallCost(function, overloadID string, args []ref.Val, result ref.Val) *uint64 {
	if function == operators.Add {
		switch result.(type) {
		case types.String, types.Bytes:
			cost := 1 + resultSize(result)
			return &cost
		}
		return nil
	}
	cost := c.kubernetes.CallCost(function, overloadID, args, result)
	if cost == nil {
		return nil
	}
	total := *cost + resultSize(result)
	return &total
}

// resultSize is the size of a string, bytes, list or map, 0 for another
// value.
func resultSize(v ref.Val) uint64 {
	if sized, ok := v.(traits.Sizer); ok {
		if n, ok := sized.Size().(types.Int); ok && n > 0 {
			return uint64(n)
		}
	}
	return 0
}

// availability evaluates the rule over obj.
func (r *Rule) availability(obj *unstructured.Unstructured) Availability {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	out, _, err := r.program.ContextEval(ctx, map[string]any{"self": obj.Object})
	if err != nil {
		return copyNotAvailable(obj, ": availableWhen did not hold (%s)", evaluationFailure(err))
	}
	switch holds, ok := out.Value().(bool); {
	case !ok:
		return copyNotAvailable(obj, ": availableWhen did not hold (not a boolean)")
	case !holds:
		return copyNotAvailable(obj, ": availableWhen is false")
	}
	return Availability{State: Available}
}

// evaluationFailure names the class of err, an evaluation's error. CEL's
// text may hold values of the member's copy: only its class is told.
func evaluationFailure(err error) string {
	var cancelled interpreter.EvalCancelledError
	switch {
	case errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded:
		return "cost limit exceeded"
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	}
	for _, class := range []string{"no such key", "no such overload", "index out of range", "division by zero"} {
		if strings.Contains(err.Error(), class) {
			return class
		}
	}
	return "evaluation error"
}
