package limiter

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
)

// batchBuckets are the bounds of ratelab_edge_redis_batch_decisions: the
// powers of two up to the largest --redis-batch.
var batchBuckets = prometheus.ExponentialBuckets(1, 2, 11)

// redisTrips counts the round trips the limiter makes to Redis and the
// decision scripts each carries, from a go-redis hook on the client.
type redisTrips struct {
	roundTrips prometheus.Counter
	batch      prometheus.Histogram
}

func newRedisTrips() redisTrips {
	return redisTrips{
		roundTrips: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelab_edge_redis_round_trips_total",
			Help: "Round trips to Redis that carried scripts (EVALSHA, EVAL, SCRIPT LOAD): a pipeline or a lone command, one per node it went to. " +
				"Round trips per decision: this over ratelab_edge_redis_batch_decisions_sum.",
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ratelab_edge_redis_batch_decisions",
			Help: "Decisions per round trip that carried any: _count is the batches sent, _sum the decisions in them " +
				"(an EVALSHA or EVAL each, or one call joined for several of one script); --redis-batch 1 sends batches of one.",
			Buckets: batchBuckets,
		}),
	}
}

// CountRedis has m count the round trips client makes that carry scripts,
// and the decisions in each (ratelab_edge_redis_round_trips_total and
// ratelab_edge_redis_batch_decisions). Call it once, before client sends
// anything: on a Cluster it counts the connections of the nodes it meets
// from then on, one round trip per node a pipeline goes to.
func (m *Metrics) CountRedis(client redis.UniversalClient) {
	h := tripHook{&m.trips}
	// A Cluster's client sends through a client per node: count on each.
	if c, ok := client.(interface{ OnNewNode(func(*redis.Client)) }); ok {
		c.OnNewNode(func(node *redis.Client) { node.AddHook(h) })
		return
	}
	client.AddHook(h)
}

// RedisRoundTrips returns how many round trips carrying scripts were sent.
func (m *Metrics) RedisRoundTrips() int64 { return counterValue(m.trips.roundTrips) }

// RedisBatches returns how many round trips carried decisions, and how many
// decisions they carried in all.
func (m *Metrics) RedisBatches() (batches, decisions int64) {
	var pb dto.Metric
	if err := m.trips.batch.Write(&pb); err != nil {
		return 0, 0
	}
	return int64(pb.GetHistogram().GetSampleCount()), int64(pb.GetHistogram().GetSampleSum())
}

// count counts one round trip of cmds, if it carries a script.
func (t *redisTrips) count(cmds ...redis.Cmder) {
	decisions, scripts := 0, 0
	for _, c := range cmds {
		switch c.Name() {
		case "evalsha", "eval", "evalsha_ro", "eval_ro":
			// One call joined for several (internal/batch's Joined)
			// carries as many decisions.
			if j, ok := c.(interface{ Calls() int }); ok {
				decisions += j.Calls()
			} else {
				decisions++
			}
			scripts++
		case "script":
			scripts++
		}
	}
	if scripts == 0 {
		return
	}
	t.roundTrips.Inc()
	if decisions > 0 {
		t.batch.Observe(float64(decisions))
	}
}

// tripHook counts each command or pipeline as it is handed to go-redis to
// send: a round trip that fails is counted, since the scripts in it may
// have run; so is one whose deadline passed before it was written, which
// Redis never saw (a decision that times out under load, rare otherwise).
type tripHook struct{ t *redisTrips }

func (h tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.t.count(cmd)
		return next(ctx, cmd)
	}
}

func (h tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.t.count(cmds...)
		return next(ctx, cmds)
	}
}

var _ redis.Hook = tripHook{}
