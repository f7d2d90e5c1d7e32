// Package health judges whether one copy, as its member holds it, is
// available. It owns that verdict, and the limits that keep a tenant's
// availableWhen from costing a replica more than a few tens of
// milliseconds and megabytes, so a rule cannot stall or OOM the manager.
// It is pure: no client, no clock but a rule's timeout, no state but a
// cache of compiled rules; the Propagation controller calls it for each
// copy a member run applies, and when it sums a Propagation up.
//
// # Inputs and outputs
//
// [Of] takes a copy as its member holds it (status included) and the
// compiled availableWhen of the resource that selects it, or nil, and
// returns an [Availability]: [Available], [NotAvailable] with a message
// naming the copy and what it waits for ("Deployment web: 1 of 3
// replicas available"), or [NotTracked] for a kind with neither a rule
// nor availableWhen, which the controller counts as available.
//
// The built-in rules, by kind: kubectl rollout status's for Deployments,
// StatefulSets and DaemonSets (each only once the member's controller has
// seen the copy's generation); a complete Job; a Service with an address,
// not endpoints, as its backends are tracked on their workloads; an
// Established CustomResourceDefinition whose names were accepted; a
// PodDisruptionBudget with its healthy pods; data kinds (ConfigMap,
// Secret, RBAC, policies...) once they exist. availableWhen, a CEL
// expression over the copy as self, replaces the kind's rule.
//
// [Compile] compiles an availableWhen, cached by its text (at most 256
// rules). [FirstUnusableRule] says why the first of a Propagation's
// rules cannot be used, and [UnusableRule] why one cannot: a
// [RuleError] of reason InvalidAvailableWhen (it does not compile, or is
// not boolean) or AvailabilityRuleRefused (it could cost too much). The
// controller then holds the members' copies as they are.
//
// # Guarantees
//
//   - A rule is estimated when compiled, for any copy of up to 1.5 MiB
//     (etcd's default request limit, which bounds every object a member
//     stores): one whose cost could exceed 50 million, or one call of
//     which could make a string or list of more than 3 MiB characters or
//     elements (format, or a call CEL cannot size, has no bound), is
//     refused before anything is applied.
//   - Each evaluation is cut at a cost of 100,000, every call that makes
//     a string, list or map charged its size too, so cost bounds what it
//     allocates; and at 1 s, checked between iterations, as a backstop.
//   - An evaluation's error is told by its class only (cost limit
//     exceeded, timed out, no such key, no such overload...): CEL's text
//     may hold values of the member's copy. A Job's failure reason is
//     shown only when it is one CamelCase word, a StatefulSet's revision
//     only when it is a revision's name.
//   - A copy of any shape, mistyped status included, is judged without a
//     panic. Everything here is safe for concurrent use.
package health
