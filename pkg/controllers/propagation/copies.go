package propagation

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcluster "sigs.k8s.io/controller-runtime/pkg/cluster"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
)

// requestTimeout bounds each request of the manager to a member, not its
// watches: a member that stops answering (frozen, cut off) holds a worker
// no longer; the request fails and is tried again. A member answers a
// request for one object within a second, and within 30 s even loaded or
// behind an admission webhook at its own longest timeout (30 s).
const requestTimeout = 30 * time.Second

// memberCopies are the copies in one member: a cache that holds only
// objects labelled as copies of this fleet, and clients whose user agent
// names the controller.
type memberCopies struct {
	*watchedKinds
	name   string
	client client.Client
	reader client.Reader

	// replayMu is held while the member's owed removals are carried out:
	// its other requests wait. replayed is set once they were, and
	// cleared when the member is Ready again.
	replayMu sync.Mutex
	replayed bool
}

// replayAgain makes the member's next request carry out its owed removals
// first.
func (mc *memberCopies) replayAgain() {
	mc.replayMu.Lock()
	defer mc.replayMu.Unlock()
	mc.replayed = false
}

// copyCaches is the fleet controller's source in every member: started
// as the controller engages a member, it builds the member's copy cache,
// watches every kind Propagations copy, and turns each event of a copy
// into a request for its Propagation in that member.
type copyCaches struct {
	fleet     string
	userAgent string
	scheme    *runtime.Scheme
	log       logr.Logger
	// kinds lists the kinds Propagations copy now, and those of the
	// copies a member owes removing; propagations lists the Propagations
	// and those whose copies it owes removing.
	kinds        func(ctx context.Context, member string) []schema.GroupVersionKind
	propagations func(ctx context.Context, member string) []types.NamespacedName
	// engaged is told of a member whose copy cache watches its kinds.
	engaged func(ctx context.Context, mc *memberCopies)

	mu      sync.Mutex
	members map[string]*memberCopies
}

var _ engage.Source = (*copyCaches)(nil)

func (c *copyCaches) String() string { return "propagated copies" }

// selector selects the copies of the fleet.
func (c *copyCaches) selector() labels.Selector {
	fleetReq, err := labels.NewRequirement(fleetv1alpha1.FleetLabel, selection.Equals, []string{c.fleet})
	if err != nil {
		panic(err) // the fleet's namespace is a valid label value
	}
	propReq, err := labels.NewRequirement(fleetv1alpha1.PropagationLabel, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*fleetReq, *propReq)
}

func (c *copyCaches) Start(ctx context.Context, clusterName string, cl crcluster.Cluster, q engage.Queue) (<-chan struct{}, error) {
	base := cl.GetHTTPClient()
	rt := transport.NewUserAgentRoundTripper(c.userAgent, base.Transport)
	httpClient := &http.Client{Transport: rt, Timeout: base.Timeout, Jar: base.Jar}
	writerTimeout := requestTimeout
	if base.Timeout > 0 {
		writerTimeout = min(writerTimeout, base.Timeout)
	}
	selector := c.selector()
	ca, err := cache.New(cl.GetConfig(), cache.Options{
		HTTPClient: httpClient, Scheme: c.scheme, Mapper: cl.GetRESTMapper(),
		DefaultLabelSelector: selector, ReaderFailOnMissingInformer: true,
		DefaultWatchErrorHandler: quietWatchErrors(c.log.WithValues("cluster", clusterName)),
	})
	if err != nil {
		return nil, err
	}
	// The writer's timeout bounds its requests, in the client and, as
	// ?timeout=, in the member.
	writerHTTP := &http.Client{Transport: rt, Timeout: writerTimeout, Jar: base.Jar}
	writer, err := client.New(cl.GetConfig(), client.Options{HTTPClient: writerHTTP, Scheme: c.scheme, Mapper: cl.GetRESTMapper()})
	if err != nil {
		return nil, err
	}
	mc := &memberCopies{
		name: clusterName, client: writer, reader: writer,
		watchedKinds: &watchedKinds{
			cluster: "member " + clusterName, cache: ca, reader: writer, mapper: cl.GetRESTMapper(), selector: selector,
			running: make(chan struct{}),
			onEvent: func(_, obj client.Object) {
				if name := obj.GetLabels()[fleetv1alpha1.PropagationLabel]; name != "" {
					q.Add(fleet.Request{ClusterName: clusterName, NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}})
				}
			},
		},
	}
	mc.run(ctx)
	c.mu.Lock()
	c.members[clusterName] = mc
	c.mu.Unlock()
	context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.members[clusterName] == mc {
			delete(c.members, clusterName)
		}
	})
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		for _, gvk := range c.kinds(ctx, clusterName) {
			if err := mc.watch(ctx, gvk); err != nil && ctx.Err() == nil {
				c.log.V(1).Info("Not watching copies of a kind", "cluster", clusterName, "kind", gvk.Kind, "reason", err.Error())
			}
		}
		c.engaged(ctx, mc)
		// A member that is engaged, or comes back, is asked about every
		// Propagation and what it owes: the requests made before it was
		// engaged, or queued when it left, were dropped.
		for _, key := range c.propagations(ctx, clusterName) {
			q.Add(fleet.Request{ClusterName: clusterName, NamespacedName: key})
		}
	}()
	return synced, nil
}

// get returns the copies of an engaged member, or nil.
func (c *copyCaches) get(clusterName string) *memberCopies {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[clusterName]
}

// memberEngaged records in the journal the copies of this fleet the
// member's cache found, so that a journal that was lost, or kept by
// another replica, learns them again, and tells the member of a lost
// journal. Only copies that carry the fleet's identity are recorded: the
// journal proves the copies stamped without one.
func (r *reconciler) memberEngaged(ctx context.Context, mc *memberCopies) {
	id, err := r.m.FleetID(ctx)
	if err != nil {
		return // the member left, or the manager stops
	}
	var found []journal.Copy
	for _, gvk := range mc.watched() {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := mc.cache.List(ctx, list, client.MatchingLabels{fleetv1alpha1.FleetIDLabel: id}); err != nil {
			continue
		}
		for i := range list.Items {
			if c := journalCopy(&list.Items[i]); c.Propagation != "" {
				found = append(found, c)
			}
		}
	}
	if err := r.journal.Record(mc.name, found); err != nil && ctx.Err() == nil {
		r.log.Error(err, "Recording the copies found in a member in the journal", "cluster", mc.name)
	}
	r.countOwed(mc.name)
	if rec := r.journal.Recovered(); rec != nil && rec.MovedTo != "" {
		obj := &fleetv1alpha1.MemberCluster{}
		if _, told := r.recoveryTold.LoadOrStore(mc.name, true); !told && r.hub.Get(ctx, types.NamespacedName{Name: mc.name}, obj) == nil {
			r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonJournalLost, "Recover",
				"the manager's journal could not be used (%v) and was moved to %s: the copies found in this member are recorded again; removals it owed for deleted Propagations are forgotten unless their copies are found", rec.Err, rec.MovedTo)
		}
	}
}
