package fleet

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/fairqueue"
)

// informerCluster is a cluster.Cluster with nothing but a cache of fake
// informers, enough for engage.Kind.Start. Its other methods panic.
type informerCluster struct {
	cluster.Cluster
	informers *informertest.FakeInformers
}

func (c informerCluster) GetCache() cache.Cache { return c.informers }

// BenchmarkRouting measures the path of one informer event to a fleet
// controller: a ConfigMap's add event through the handler an engage.Kind
// source with handler.EnqueueRequestForObject registered on its cluster's
// informer, tagged with the cluster's name, into the fair queue, then Get
// and Done. Each round sends 1,000 ConfigMaps, each to the informer of its
// cluster, over 1, 100 and 1,000 clusters. Besides ns/op (1,000 events) it
// reports ns/event.
func BenchmarkRouting(b *testing.B) {
	objects := make([]*corev1.ConfigMap, 1000)
	for i := range objects {
		objects[i] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("object-%d", i)}}
	}
	for _, clusters := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("clusters=%d", clusters), func(b *testing.B) {
			ctx := logf.IntoContext(b.Context(), logr.Discard())
			q := fairqueue.New[Request]("", func(r Request) string { return r.ClusterName }, fairqueue.Options[Request]{})
			defer q.ShutDown()
			src := engage.NewKind(&corev1.ConfigMap{}, func(cluster.Cluster) handler.EventHandler {
				return &handler.EnqueueRequestForObject{}
			})
			informers := make([]*controllertest.FakeInformer, clusters)
			for i := range informers {
				cl := informerCluster{informers: &informertest.FakeInformers{}}
				if _, err := src.Start(ctx, fmt.Sprintf("cluster-%d", i), cl, q); err != nil {
					b.Fatal(err)
				}
				informer, err := cl.informers.FakeInformerFor(ctx, &corev1.ConfigMap{})
				if err != nil {
					b.Fatal(err)
				}
				informers[i] = informer
			}
			informers[clusters-1].Add(objects[0])
			if got, want := q.Len(), 1; got != want {
				b.Fatalf("queue length after one event = %d, want %d", got, want)
			}
			got, _ := q.Get()
			q.Done(got)
			if want := (Request{ClusterName: fmt.Sprintf("cluster-%d", clusters-1), NamespacedName: client.ObjectKeyFromObject(objects[0])}); got != want {
				b.Fatalf("Get() = %v, want %v", got, want)
			}
			for b.Loop() {
				for i, obj := range objects {
					informers[i%clusters].Add(obj)
				}
				for range objects {
					item, _ := q.Get()
					q.Done(item)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(objects)), "ns/event")
		})
	}
}
