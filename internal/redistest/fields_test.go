package redistest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestFields(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	c := srv.Client()
	ctx := context.Background()
	tests := []struct {
		name    string
		setup   func(key string) error
		want    map[string]string
		wantErr string // a part of the error; "" for none
	}{
		{
			name:  "hash",
			setup: func(k string) error { return c.HSet(ctx, k, "_id", "x", "t", "5").Err() },
			want:  map[string]string{"_id": "x", "t": "5"},
		},
		{
			name: "string",
			setup: func(k string) error {
				return c.Set(ctx, k, mp("_id", "sliding_window/1000000/10", "_x", "1732890000000000", "h", "1732890000", "t", "1", "7", "1"), 0).Err()
			},
			want: map[string]string{"_id": "sliding_window/1000000/10", "_x": "1732890000000000", "h": "1732890000", "t": "1", "7": "1"},
		},
		{
			name:  "empty string",
			setup: func(k string) error { return c.Set(ctx, k, "", 0).Err() },
			want:  map[string]string{},
		},
		{
			name:  "missing",
			setup: func(string) error { return nil },
			want:  map[string]string{},
		},
		{
			name:    "a map cut short",
			setup:   func(k string) error { s := mp("_id", "x", "t", "5"); return c.Set(ctx, k, s[:len(s)-1], 0).Err() },
			wantErr: "ends early",
		},
		{
			name:    "text",
			setup:   func(k string) error { return c.Set(ctx, k, "_id x t 5", 0).Err() },
			wantErr: "not a MessagePack map",
		},
		{
			name:    "a field twice",
			setup:   func(k string) error { return c.Set(ctx, k, mp("t", "1", "t", "2"), 0).Err() },
			wantErr: "field t twice",
		},
		{
			name:    "list",
			setup:   func(k string) error { return c.RPush(ctx, k, "a", "b").Err() },
			wantErr: "is a list",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := "fields:" + tt.name
			if err := tt.setup(key); err != nil {
				t.Fatal(err)
			}
			got, err := Fields(ctx, c, key)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Fields: got %v %v, want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tt.want) || got == nil {
				t.Errorf("Fields: got %v %v, want %v", got, err, tt.want)
			}
		})
	}
}

func TestField(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	c := srv.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "s", mp("c", "7", "n", "x"), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, "h", "c", "8").Err(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, key, field string
		want             int
		wantNil          bool // the error is redis.Nil
		wantErr          bool // another error
	}{
		{name: "string", key: "s", field: "c", want: 7},
		{name: "hash", key: "h", field: "c", want: 8},
		{name: "no such field", key: "s", field: "d", wantNil: true},
		{name: "no such key", key: "none", field: "c", wantNil: true},
		{name: "not a number", key: "s", field: "n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FieldInt(ctx, c, tt.key, tt.field)
			switch {
			case tt.wantNil:
				if !errors.Is(err, redis.Nil) {
					t.Errorf("FieldInt: got %d %v, want redis.Nil", got, err)
				}
			case tt.wantErr:
				if err == nil || errors.Is(err, redis.Nil) {
					t.Errorf("FieldInt: got %d %v, want an error other than redis.Nil", got, err)
				}
			case err != nil || got != tt.want:
				t.Errorf("FieldInt: got %d %v, want %d", got, err, tt.want)
			}
		})
	}
	if v, err := Field(ctx, c, "s", "n"); err != nil || v != "x" {
		t.Errorf("Field: got %q %v, want x", v, err)
	}
}

func TestSetFields(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	c := srv.Client()
	ctx := context.Background()
	tests := []struct {
		name    string
		newType string // of a missing key
		setup   func(key string) error
		pairs   []string
		want    map[string]string
		wantTyp string
		wantTTL bool // the key keeps a time to live
		wantErr string
	}{
		{
			name:    "hash",
			setup:   func(k string) error { return c.HSet(ctx, k, "_id", "x", "t", "5").Err() },
			pairs:   []string{"t", "6", "c", "1"},
			want:    map[string]string{"_id": "x", "t": "6", "c": "1"},
			wantTyp: "hash", wantTTL: true,
		},
		{
			name:    "string",
			setup:   func(k string) error { return c.Set(ctx, k, mp("_id", "x", "t", "5"), 0).Err() },
			pairs:   []string{"t", "6", "c", "1"},
			want:    map[string]string{"_id": "x", "t": "6", "c": "1"},
			wantTyp: "string", wantTTL: true,
		},
		{
			name:    "missing as a hash",
			newType: "hash",
			setup:   func(string) error { return nil },
			pairs:   []string{"_id", "x"},
			want:    map[string]string{"_id": "x"},
			wantTyp: "hash",
		},
		{
			name:    "missing as a string",
			newType: "string",
			setup:   func(string) error { return nil },
			pairs:   []string{"_id", "sliding_window/60000000/10", "t", "5"},
			want:    map[string]string{"_id": "sliding_window/60000000/10", "t": "5"},
			wantTyp: "string",
		},
		{
			name:    "missing",
			setup:   func(string) error { return nil },
			pairs:   []string{"_id", "x"},
			want:    map[string]string{"_id": "x"},
			wantTyp: NewCounterType,
		},
		{
			name:    "odd pair count",
			setup:   func(k string) error { return c.Set(ctx, k, mp("_id", "x"), 0).Err() },
			pairs:   []string{"t", "6", "c"},
			wantErr: "want pairs",
		},
		{
			name:    "a value with a space",
			setup:   func(k string) error { return c.Set(ctx, k, mp("_id", "x"), 0).Err() },
			pairs:   []string{"t", "6 7"},
			wantErr: "without spaces",
		},
		{
			name:    "a malformed string",
			setup:   func(k string) error { return c.Set(ctx, k, "_id x t", 0).Err() },
			pairs:   []string{"t", "6"},
			wantErr: "not a MessagePack map",
		},
		{
			name:    "list",
			setup:   func(k string) error { return c.RPush(ctx, k, "a", "b").Err() },
			pairs:   []string{"t", "6"},
			wantErr: "is a list",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := "setfields:" + tt.name
			if err := tt.setup(key); err != nil {
				t.Fatal(err)
			}
			if c.Exists(ctx, key).Val() == 1 {
				if err := c.Expire(ctx, key, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}
			dump := func() string { return c.Dump(ctx, key).Val() }
			before := dump()
			var err error
			if tt.newType == "" {
				err = SetFields(ctx, c, key, tt.pairs...)
			} else {
				err = setFields(ctx, c, key, tt.newType, tt.pairs)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("SetFields: got %v, want an error with %q", err, tt.wantErr)
				}
				if after := dump(); after != before {
					t.Errorf("a failed SetFields changed the key: %q, was %q", after, before)
				}
				return
			}
			if err != nil {
				t.Fatalf("SetFields: %v", err)
			}
			if got, err := Fields(ctx, c, key); err != nil || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("fields: got %v %v, want %v", got, err, tt.want)
			}
			if got := c.Type(ctx, key).Val(); got != tt.wantTyp {
				t.Errorf("type: got %s, want %s", got, tt.wantTyp)
			}
			ttl := c.PTTL(ctx, key).Val()
			if tt.wantTTL && (ttl <= 0 || ttl > time.Hour) {
				t.Errorf("time to live: got %v, want the hour it had", ttl)
			}
			if !tt.wantTTL && ttl != -1 { // PTTL answers -1 for a key without one
				t.Errorf("time to live: got %v, want none", ttl)
			}
		})
	}
}

// mp returns the names and values of kv, in turn, as a string counter
// holds them (packPairs).
func mp(kv ...string) string {
	var names, values []string
	for i := 0; i+1 < len(kv); i += 2 {
		names, values = append(names, kv[i]), append(values, kv[i+1])
	}
	return packPairs(names, values)
}
