package proxy

import (
	"context"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// The handler's stores are behind --fail-mode in a failmode.Failover:
// rate limits decided by the store, concurrency slots taken in the slots,
// and when either fails it is there, and only there, that the mode
// decides what the request gets. The handler labels the verdict; it
// never looks at a store error itself. What follows hands it each
// limit's local share (ruleset.Limit's Local and ConcLocal).

// allow decides reqs through the failover, under FailLocal with the local
// params of lims[i] (failmode.Failover.Allow).
func (h *Handler) allow(ctx context.Context, now time.Time, reqs []limit.Request, res []limit.Result, lims []*ruleset.Limit) (bool, failmode.Verdict, limit.Alone) {
	return h.failover.Allow(ctx, now, reqs, res, func(i int) *limit.Params { return &lims[i].Local })
}

// charge counts charges and releases after the fact on the store that
// decided the request (failmode.Failover.Charge).
func (h *Handler) charge(ctx context.Context, now time.Time, v failmode.Verdict, alone limit.Alone, reqs []limit.Request, lims []*ruleset.Limit, res []limit.Result) error {
	return h.failover.Charge(ctx, now, v, alone, reqs, res, func(i int) *limit.Params { return &lims[i].Local })
}

// acquireSlots takes the slots of reqs through the failover, under FailLocal
// with the local share of conc[i]'s concurrency
// (failmode.Failover.Acquire).
func (h *Handler) acquireSlots(ctx context.Context, reqs []limit.SlotRequest, conc []*ruleset.Limit) (limit.Permit, int, failmode.Verdict) {
	return h.failover.Acquire(ctx, reqs, func(i int) int64 { return conc[i].ConcLocal })
}
