// Package member owns member clusters: from a registration (a name and a
// kubeconfig) to a running controller-runtime cluster.Cluster, and the pool
// that holds them by name.
//
// # Registration
//
// A [registry.Registration] is a cluster name and its kubeconfig.
// [Pool.Set] parses the kubeconfig with the pool's kubeconfig.Policy
// before any client is built. Member names are DNS-1123 subdomains
// ([registry.ValidateName]); "" ([registry.HubName]) is the hub. A
// member's state is the API's MemberState, and each probe's outcome a
// [registry.ProbeResult].
//
// # Members
//
// Each member owns its HTTP transport: a dialer of its own keeps
// client-go's TLS cache from sharing a connection between members, and
// when the member stops every connection it opened is closed. The
// transport keeps track of the HTTP/2 connection the member's requests
// use: between SelfSubjectReviews, the member's probes PING it
// ([HealthOptions]). Its cache
// strips managedFields and fails reads of kinds no informer watches
// (ReaderFailOnMissingInformer) instead of quietly starting a cluster-wide
// informer in every member; read such kinds with GetAPIReader. Its
// informers' first lists or watches take turns across the pool, a few at
// a time, each turn at most a second (a member whose turn ran out takes
// no more), so that members engaging together do not all fill their
// caches at once. Its REST
// mapper maps the core group's v1 kinds, which every API server serves,
// without asking, and reads the legacy discovery documents for the
// others, so it holds the resources of the API groups the member's
// clients use, not those of every group the member serves. Options.Configure adjusts the rest per member.
//
// # Lifecycle
//
// The pool follows a registry (Options.Registry) from [Pool.Start] until
// its context ends: a member runs for each cluster the registry accepts,
// with its current kubeconfig, and none for the others; each name settles
// in order, different names in parallel. The pool writes back each
// member's state and probes, and each kubeconfig it refuses, and keeps
// each member's series (fleet_member_ready, fleet_member_state, probes)
// on Options.Metrics while it holds the member.
//
// [Pool.Set] adds a member, or replaces it when its kubeconfig changed;
// [Pool.Remove] removes it. A kubeconfig that changed only its bearer
// token or client certificate rotates the running member's credentials
// instead: its transport reads the token at every request and the
// certificate at every TLS handshake, and its connections are closed so
// that watches reconnect with the new credentials while the cache stays.
// A changed server, CA or anything else replaces the member.
//
// Each member runs in its own context, derived from the one [Pool.Start]
// was given. Each time it connects, it first reads its cluster's
// identity (its kube-system Namespace UID, or a hash of its server and
// CA) and reports it to the registry ([registry.Registry.Identify]): a
// name another registered first keeps is refused and never engaged, and
// the keeper is engaged only once no other name's member of the cluster
// runs (unless Options.AllowDuplicateClusters). Then its field indexes
// are applied ([Pool.IndexField]
// reaches current and later members), then Options.Engage hands it on and
// its cluster starts, in the member's own goroutine. That is the only
// goroutine a member has of its own, but for a probe's while it is under
// way: probes run from timers.
// Stopping a member cancels that context and waits until the cluster has
// returned and Engage's channel has closed; then its connections are
// closed. Nothing a member
// started outlives it. The pool never holds its lock during network I/O
// or while a member stops.
package member
