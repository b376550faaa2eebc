package enumflag

import "testing"

type color string

func TestSet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    color
		wantErr string
	}{
		{name: "first", in: "red", want: "red"},
		{name: "last", in: "blue", want: "blue"},
		{name: "unknown", in: "Red", want: "green", wantErr: `"Red" is not one of red, blue`},
		{name: "empty", in: "", want: "green", wantErr: `"" is not one of red, blue`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := color("green")
			err := Set(&v, tt.in, "red", "blue")
			if got := errString(err); got != tt.wantErr {
				t.Errorf("error: got %q, want %q", got, tt.wantErr)
			}
			if v != tt.want {
				t.Errorf("value: got %q, want %q", v, tt.want)
			}
		})
	}
}

func TestIndex(t *testing.T) {
	t.Parallel()
	names := []string{"off", "on", "auto"}
	tests := []struct {
		name    string
		in      string
		want    int
		wantErr string
	}{
		{name: "first", in: "off", want: 0},
		{name: "last", in: "auto", want: 2},
		{name: "unknown", in: "of", wantErr: `"of" is not one of off, on, auto`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Index(tt.in, names)
			if e := errString(err); e != tt.wantErr {
				t.Errorf("error: got %q, want %q", e, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("index: got %d, want %d", got, tt.want)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
