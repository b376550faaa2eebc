package proxy

import "net/http"

// statusWriter records the status a response was given, for logs and
// metrics. Unwrap lets http.ResponseController (used by ReverseProxy for
// flushing and protocol upgrades) reach the underlying writer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// markStatus records a status that is not sent, such as 499 for a client
// that went away.
func markStatus(w http.ResponseWriter, code int) {
	if sw, ok := w.(*statusWriter); ok && sw.status == 0 {
		sw.status = code
	}
}
