package tracing

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// queue is the span processor: a bounded queue that the request path
// never waits on, and one goroutine that exports batches from it. It does
// what the SDK's batch span processor does, and counts the spans it
// drops, which that one does not report: a receiver that is down or slow
// fills the queue, and what does not fit is dropped, never waited for.
type queue struct {
	exp     sdktrace.SpanExporter
	ch      chan sdktrace.ReadOnlySpan
	batch   int
	delay   time.Duration
	timeout time.Duration

	dropped, exported, failed atomic.Int64

	// flushes asks the exporting goroutine to export everything queued
	// and close the channel it sends.
	flushes chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	stopped atomic.Bool
}

func newQueue(exp sdktrace.SpanExporter, cfg Config) *queue {
	q := &queue{
		exp:     exp,
		ch:      make(chan sdktrace.ReadOnlySpan, positive(cfg.MaxQueue, DefaultMaxQueue)),
		batch:   positive(cfg.BatchSize, DefaultBatchSize),
		delay:   positiveDuration(cfg.BatchDelay, DefaultBatchDelay),
		timeout: positiveDuration(cfg.ExportTimeout, DefaultExportTimeout),
		flushes: make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go q.run()
	return q
}

func positive(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func positiveDuration(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}

// OnStart implements sdktrace.SpanProcessor.
func (q *queue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues a sampled span, or drops and counts it when the queue is
// full. It never blocks.
func (q *queue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() || q.stopped.Load() {
		return
	}
	select {
	case q.ch <- s:
	default:
		q.dropped.Add(1)
	}
}

// run exports batches: when one is full, when the oldest span in it has
// waited delay, when asked to flush, and what is left when stopped.
func (q *queue) run() {
	defer close(q.done)
	buf := make([]sdktrace.ReadOnlySpan, 0, q.batch)
	timer := time.NewTimer(q.delay)
	defer timer.Stop()
	export := func() {
		if len(buf) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
		err := q.exp.ExportSpans(ctx, buf)
		cancel()
		if err != nil {
			q.failed.Add(1)
		} else {
			q.exported.Add(int64(len(buf)))
		}
		clear(buf)
		buf = buf[:0]
	}
	drain := func() {
		for {
			select {
			case s := <-q.ch:
				buf = append(buf, s)
				if len(buf) == q.batch {
					export()
				}
			default:
				export()
				return
			}
		}
	}
	for {
		select {
		case s := <-q.ch:
			buf = append(buf, s)
			if len(buf) == q.batch {
				export()
				timer.Reset(q.delay)
			}
		case <-timer.C:
			export()
			timer.Reset(q.delay)
		case done := <-q.flushes:
			drain()
			close(done)
		case <-q.stop:
			drain()
			return
		}
	}
}

// ForceFlush implements sdktrace.SpanProcessor: it exports what is
// queued, or gives up when ctx ends.
func (q *queue) ForceFlush(ctx context.Context) error {
	if q.stopped.Load() {
		return nil
	}
	done := make(chan struct{})
	select {
	case q.flushes <- done:
	case <-q.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown implements sdktrace.SpanProcessor: it exports what is queued
// and stops the exporter, within ctx.
func (q *queue) Shutdown(ctx context.Context) error {
	q.once.Do(func() {
		q.stopped.Store(true)
		close(q.stop)
	})
	select {
	case <-q.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return q.exp.Shutdown(ctx)
}

var _ sdktrace.SpanProcessor = (*queue)(nil)
