package limittest

import (
	"testing"
	"time"
)

func TestQuietWindow(t *testing.T) {
	for _, tc := range []struct {
		now  time.Time
		want time.Duration
	}{
		// Mid-hour: an hour is quiet.
		{time.Date(2026, 11, 29, 19, 30, 0, 0, time.UTC), time.Hour},
		// A second before the hour, and a second after it: not an hour.
		{time.Date(2026, 11, 29, 19, 59, 59, 0, time.UTC), 0},
		{time.Date(2026, 11, 29, 20, 0, 1, 0, time.UTC), 0},
	} {
		got := QuietWindow(time.Hour, 10*time.Minute, tc.now)
		at := time.Duration(tc.now.UnixNano() % int64(got))
		if at < 10*time.Minute || got-at <= 10*time.Minute {
			t.Errorf("%v: window %v ends %v before or %v after it, within the margin", tc.now, got, at, got-at)
		}
		if tc.want != 0 && got != tc.want {
			t.Errorf("%v: window %v, want %v", tc.now, got, tc.want)
		}
		if tc.want == 0 && got == time.Hour {
			t.Errorf("%v: window of an hour, which ends within a second", tc.now)
		}
	}
}
