package fairqueue

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// BenchmarkQueue measures Add, Get and Done of 1,000 items spread over 1,
// 10 and 1,000 clusters, on the fair queue and on controller-runtime's
// priority queue, both without metrics. Besides ns/op (1,000 items) it
// reports ns/item.
func BenchmarkQueue(b *testing.B) {
	queues := []struct {
		name string
		new  func() priorityqueue.PriorityQueue[Request]
	}{
		{"fair", func() priorityqueue.PriorityQueue[Request] { return New("", requestCluster, Options[Request]{}) }},
		{"controller-runtime", func() priorityqueue.PriorityQueue[Request] { return priorityqueue.New[Request]("") }},
	}
	for _, clusters := range []int{1, 10, 1000} {
		items := make([]Request, 1000)
		for i := range items {
			items[i] = Request{
				ClusterName:    fmt.Sprintf("cluster-%d", i%clusters),
				NamespacedName: types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("object-%d", i)},
			}
		}
		for _, queue := range queues {
			b.Run(fmt.Sprintf("%s/clusters=%d", queue.name, clusters), func(b *testing.B) {
				q := queue.new()
				defer q.ShutDown()
				for b.Loop() {
					for _, item := range items {
						q.Add(item)
					}
					for range items {
						item, _ := q.Get()
						q.Done(item)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(items)), "ns/item")
			})
		}
	}
}
