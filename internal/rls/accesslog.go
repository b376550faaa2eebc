package rls

import (
	"log/slog"
	"strconv"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/observe"
	"google.golang.org/grpc/status"
)

// AccessLog writes one JSON line per ShouldRateLimit call (--access-log)
// to an observe.AccessLog, the log of `gateway serve`: "time" is when the
// call was decided, to the nanosecond. Descriptor values are written as
// the log writes the values of keyed limits (observe.AccessLog.Value):
// hashed under the key-hash secret, as they are only with
// --access-log-keys; they are client addresses, user IDs and the like.
// Keys are written as they are. It is safe for concurrent use; the
// observe.AccessLog is its caller's to close.
type AccessLog struct {
	log *observe.AccessLog
}

// NewAccessLog returns an AccessLog writing to log.
func NewAccessLog(log *observe.AccessLog) *AccessLog { return &AccessLog{log: log} }

// logDescriptor is one descriptor of a line.
type logDescriptor struct {
	Entries [][2]string `json:"entries"`
	// HitsAddend is the descriptor's own hits_addend, if it set one.
	HitsAddend *uint64 `json:"hits_addend,omitempty"`
	Code       string  `json:"code"`
	// Limit is the limit that applied ("10/minute"), "" when none did.
	Limit     string `json:"limit,omitempty"`
	Name      string `json:"limit_name,omitempty"`
	Remaining uint32 `json:"remaining"`
	// Reset is the status's duration_until_reset, in seconds.
	Reset float64 `json:"reset,omitempty"`
}

// ObserveCall writes the call's line. It implements Observer.
func (a *AccessLog) ObserveCall(c *Call) {
	rec := slog.NewRecord(c.Start, slog.LevelInfo, "rls", 0)
	req := c.Request
	rec.AddAttrs(
		slog.String("domain", req.GetDomain()),
		slog.Uint64("hits_addend", uint64(req.GetHitsAddend())),
	)
	code := c.Response.GetOverallCode().String()
	if c.Err != nil {
		code = status.Code(c.Err).String() // InvalidArgument, Canceled, ...
	}
	rec.AddAttrs(slog.String("code", code))
	if c.Err != nil {
		rec.AddAttrs(slog.String("error", status.Convert(c.Err).Message()))
	}
	descs := req.GetDescriptors()
	out := make([]logDescriptor, 0, min(len(descs), MaxDescriptors))
	statuses := c.Response.GetStatuses()
	for i, d := range descs {
		if i == MaxDescriptors {
			break // a refused request may carry any number
		}
		es := d.GetEntries()
		ld := logDescriptor{Entries: make([][2]string, 0, min(len(es), MaxEntries))}
		for j, e := range es {
			if j == MaxEntries {
				break
			}
			v := cut(a.log.Value(e.GetValue())) // a raw value is cut
			ld.Entries = append(ld.Entries, [2]string{cut(e.GetKey()), v})
		}
		if h := d.GetHitsAddend(); h != nil {
			v := h.GetValue()
			ld.HitsAddend = &v
		}
		if i < len(statuses) {
			st := statuses[i]
			ld.Code = st.GetCode().String()
			ld.Remaining = st.GetLimitRemaining()
			if l := st.GetCurrentLimit(); l != nil {
				ld.Limit = strconv.FormatUint(uint64(l.GetRequestsPerUnit()), 10) + "/" + strings.ToLower(l.GetUnit().String())
				ld.Name = l.GetName()
			}
			if r := st.GetDurationUntilReset(); r != nil {
				ld.Reset = r.AsDuration().Seconds()
			}
		}
		out = append(out, ld)
	}
	rec.AddAttrs(
		slog.Any("descriptors", out),
		slog.Float64("duration", c.Duration.Seconds()),
		slog.String("peer", c.Peer),
	)
	a.log.Write(rec)
}

// cut returns s, or its first MaxKeyBytes bytes when longer: only a
// refused call (its keys and values over MaxKeyBytes) carries a longer
// one, and the line need not grow with what a caller sends.
func cut(s string) string {
	if len(s) <= MaxKeyBytes {
		return s
	}
	return strings.ToValidUTF8(s[:MaxKeyBytes], "")
}

var _ Observer = (*AccessLog)(nil)
