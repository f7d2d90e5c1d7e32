package fleettest

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DeploymentController stands in for the Deployment controller of member
// API servers, which envtest does not run. It marks each Deployment of
// Namespace rolled out (every replica updated and available) Delay after
// it sees its spec change, unless the first container's image is one of
// Never, and records each change: when it was seen, and marked.
type DeploymentController struct {
	Namespace string
	Delay     time.Duration
	Never     []string

	mu sync.Mutex
	// members are the member API servers' clients, by member name.
	members map[string]client.Client
	changes []DeploymentChange
}

// Add has the controller roll out member's Deployments, through cl.
func (d *DeploymentController) Add(member string, cl client.Client) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.members == nil {
		d.members = map[string]client.Client{}
	}
	d.members[member] = cl
}

// DeploymentChange is one spec change of a member's Deployment.
type DeploymentChange struct {
	Member, Name, Image string
	Generation          int64
	// Seen is when the change was seen, Available when the Deployment was
	// marked rolled out (zero if it never was).
	Seen, Available time.Time
}

// Start runs the controller until the test ends.
func (d *DeploymentController) Start(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			d.mu.Lock()
			members := maps.Clone(d.members)
			d.mu.Unlock()
			for member, cl := range members {
				d.sync(ctx, member, cl)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// sync records the spec changes of member's Deployments and marks those
// whose delay passed.
func (d *DeploymentController) sync(ctx context.Context, member string, cl client.Client) {
	var list appsv1.DeploymentList
	if err := cl.List(ctx, &list, client.InNamespace(d.Namespace)); err != nil {
		return
	}
	for i := range list.Items {
		dep := &list.Items[i]
		if dep.Status.ObservedGeneration == dep.Generation {
			continue
		}
		change := d.seen(member, dep)
		if change.Available.IsZero() && time.Since(change.Seen) >= d.Delay && !slices.Contains(d.Never, change.Image) {
			n := ptr.Deref(dep.Spec.Replicas, 1)
			dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
			if cl.Status().Update(ctx, dep) == nil {
				d.marked(member, dep)
			}
		}
	}
}

func (d *DeploymentController) seen(member string, dep *appsv1.Deployment) DeploymentChange {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.changes {
		if c.Member == member && c.Name == dep.Name && c.Generation == dep.Generation {
			return c
		}
	}
	c := DeploymentChange{Member: member, Name: dep.Name, Generation: dep.Generation, Seen: time.Now()}
	if containers := dep.Spec.Template.Spec.Containers; len(containers) > 0 {
		c.Image = containers[0].Image
	}
	d.changes = append(d.changes, c)
	return c
}

func (d *DeploymentController) marked(member string, dep *appsv1.Deployment) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, c := range d.changes {
		if c.Member == member && c.Name == dep.Name && c.Generation == dep.Generation {
			d.changes[i].Available = time.Now()
		}
	}
}

// Changes returns every change seen, in the order seen.
func (d *DeploymentController) Changes() []DeploymentChange {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.changes)
}
