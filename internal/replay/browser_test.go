//go:build unix

package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write docs/replay-report.png from TestReplayReportInBrowser")

// browserProbe is put at the top of a copy of the report: it records the
// page's errors, and when the page has loaded, per chart the number of
// series that render with an extent, as attributes of <body> that
// --dump-dom prints.
const browserProbe = `<script>
(function () {
  var errors = [];
  window.addEventListener("error", function (e) {
    errors.push("error: " + (e.message || (e.target && e.target.outerHTML) || e.type));
  }, true);
  var consoleError = console.error;
  console.error = function () {
    errors.push("console.error: " + Array.prototype.join.call(arguments, " "));
    consoleError.apply(console, arguments);
  };
  window.addEventListener("load", function () {
    var perChart = [], unrendered = 0;
    document.querySelectorAll("figure.chart").forEach(function (f) {
      var n = 0;
      f.querySelectorAll("svg .series").forEach(function (p) {
        var b = p.getBBox();
        if (b.width > 0 && p.getTotalLength() > 0) { n++; } else { unrendered++; }
      });
      perChart.push(n);
    });
    var b = document.body;
    b.setAttribute("data-probe-series", perChart.join(","));
    b.setAttribute("data-probe-unrendered", unrendered);
    b.setAttribute("data-probe-overflow", document.documentElement.scrollWidth > window.innerWidth ? "yes" : "no");
    b.setAttribute("data-probe-errors", JSON.stringify(errors));
    b.setAttribute("data-probe-done", "yes");
  });
})();
</script>
`

// findChromium returns Debian's chromium, skipping the test under -short
// or when it is not installed, except in CI, where that is a failure.
func findChromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the browser test needs chromium")
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if ci := os.Getenv("CI"); ci == "true" || ci == "1" {
		t.Fatal("chromium is not installed; CI must install it (Debian: apt-get install chromium)")
	}
	t.Skip("chromium is not installed (Debian: apt-get install chromium); skipping the browser test outside CI")
	return ""
}

// chromiumTimeout bounds one run of chromium: only a hang. A run takes
// seconds on a quiet machine, and up to a minute on a loaded one.
const chromiumTimeout = 5 * time.Minute

// runChromium runs headless chromium with args on page and returns its
// stdout and stderr. It kills chromium and its children if it has not
// finished within chromiumTimeout.
func runChromium(t *testing.T, bin, page string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), chromiumTimeout)
	defer cancel()
	base := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0",
	}
	cmd := exec.CommandContext(ctx, bin, append(append(base, args...), "file://"+page)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Chromium is a tree of processes: kill the whole group.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // any child left behind
	}
	if ctx.Err() != nil {
		t.Fatalf("chromium did not finish within %s\n%s", chromiumTimeout, errOut.String())
	}
	if err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		t.Fatalf("chromium %v: %v\n%s", args, err, errOut.String())
	}
	return out.String(), errOut.String()
}

// consoleLines returns chromium's logged console messages about page.
func consoleLines(stderr, page string) []string {
	var out []string
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, ":CONSOLE") && strings.Contains(line, filepath.Base(page)) {
			out = append(out, line)
		}
	}
	return out
}

var probeAttr = regexp.MustCompile(`data-probe-([a-z]+)="([^"]*)"`)

// TestReplayReportInBrowser opens the report in headless chromium: it must
// load without errors or console messages, and every chart must draw its
// series. It also takes docs/replay.md's screenshot (written to
// docs/replay-report.png with -update-screenshot).
func TestReplayReportInBrowser(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	res := demoResult(t, true)
	var buf bytes.Buffer
	if err := res.WriteReport(&buf); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	report := filepath.Join(dir, "report.html")
	probed := filepath.Join(dir, "probed.html")
	if err := os.WriteFile(report, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	page := strings.Replace(buf.String(), "<head>\n", "<head>\n"+browserProbe, 1)
	if err := os.WriteFile(probed, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}

	dom, stderr := runChromium(t, bin, probed, "--dump-dom", "--virtual-time-budget=5000")
	body := dom[strings.Index(dom, "<body"):]
	body = body[:strings.IndexByte(body, '>')]
	probe := map[string]string{}
	for _, m := range probeAttr.FindAllStringSubmatch(body, -1) {
		probe[m[1]] = html.UnescapeString(m[2])
	}
	if probe["done"] != "yes" {
		t.Fatalf("the page did not finish loading; <body> is %s\n%s", body, stderr)
	}
	var pageErrors []string
	if err := json.Unmarshal([]byte(probe["errors"]), &pageErrors); err != nil || len(pageErrors) > 0 {
		t.Errorf("page errors: %v (%v)", pageErrors, err)
	}
	if lines := consoleLines(stderr, probed); len(lines) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(lines, "\n"))
	}
	want := []string{"4"} // all requests, then one chart per group
	for range res.Groups {
		want = append(want, "4")
	}
	if got := probe["series"]; got != strings.Join(want, ",") {
		t.Errorf("rendered series per chart: got %s, want %s", got, strings.Join(want, ","))
	}
	if got := probe["unrendered"]; got != "0" {
		t.Errorf("series without an extent: got %s, want 0", got)
	}
	if got := probe["overflow"]; got != "no" {
		t.Errorf("the page is wider than the window")
	}

	// The screenshot, of the report as operators get it.
	shot := filepath.Join(dir, "replay-report.png")
	_, stderr = runChromium(t, bin, report, "--screenshot="+shot, "--window-size=1280,1600")
	if lines := consoleLines(stderr, report); len(lines) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(lines, "\n"))
	}
	png, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, stderr)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10_000 {
		t.Fatalf("the screenshot is not a PNG of a page (%d bytes)", len(png))
	}
	if *updateScreenshot {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "replay-report.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("wrote docs/replay-report.png (" + strconv.Itoa(len(png)) + " bytes)")
	}
}
