package limit

import (
	"reflect"
	"testing"
)

// TestParamsEqualComparesEveryField changes each field of Params in turn:
// equal must see every change, so a field added to Params without
// extending equal fails here.
func TestParamsEqualComparesEveryField(t *testing.T) {
	p := Params{Algorithm: "sliding_window", Limit: 10, Window: 1e9, Precision: 10, Burst: 5, Warmup: 2e9, Lock: 3e9}
	if q := p; !p.equal(&q) {
		t.Fatal("equal(p, p) is false")
	}
	v := reflect.ValueOf(&p).Elem()
	for i := range v.NumField() {
		q := p
		f := reflect.ValueOf(&q).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		default:
			t.Fatalf("Params.%s has kind %s, which this test cannot change", v.Type().Field(i).Name, f.Kind())
		}
		if p.equal(&q) {
			t.Errorf("equal does not compare Params.%s", v.Type().Field(i).Name)
		}
		if p == q {
			t.Fatalf("changing Params.%s left it ==", v.Type().Field(i).Name)
		}
	}
}
