package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

// Chart renders two SVG bar charts, one above the other: the
// client-observed gap per scenario, vipd next to keepalived, and the time
// until another node answered (takeover). Bars are medians, whiskers span
// min to max. The chart widens to fit every scenario with trials.
func Chart(r *Results) string {
	const panelH = 420
	n := len(chartScenarios(r, false))
	width := max(minChartWidth, chartLeft+20+n*chartGroup+chartRight)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, 2*panelH, width, 2*panelH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	panel(&b, r, width, 0, "Client-observed gap per scenario (bar: median, whisker: min-max)", gapOf, false)
	panel(&b, r, width, panelH, "Event to the first answer from another node (takeover)", takeoverOf, true)
	b.WriteString("</svg>\n")
	return b.String()
}

// chartTrials are sys's trials of scenario sc that a panel draws:
// onlyMoved keeps those in which another node answered (see moved).
func chartTrials(r *Results, sys, sc string, onlyMoved bool) []Trial {
	ts, _ := r.trials(sys, sc)
	if onlyMoved {
		ts = moved(ts)
	}
	return ts
}

// chartScenarios are the scenarios, in order, with a trial to draw for
// some system.
func chartScenarios(r *Results, onlyMoved bool) []string {
	var scs []string
	for _, sc := range Scenarios {
		for _, sys := range Systems {
			if len(chartTrials(r, sys, sc, onlyMoved)) > 0 {
				scs = append(scs, sc)
				break
			}
		}
	}
	return scs
}

// The chart's layout: its narrowest width, the plot's margins, and the
// width of one scenario's group of bars.
const (
	minChartWidth         = 860
	chartLeft, chartRight = 70, 20
	chartGroup            = 150
)

// panel draws one bar chart of metric, width wide, at vertical offset
// off; onlyMoved keeps the trials in which another node answered (see
// moved).
func panel(w *strings.Builder, r *Results, width, off int, title string, metric func(Trial) time.Duration, onlyMoved bool) {
	const (
		height              = 420
		left, right         = chartLeft, chartRight
		top, bottom         = 50, 70
		barW, barGap, group = 34, 6, chartGroup
	)
	colors := map[string]string{"vipd": "#2b6cb0", "keepalived": "#c05621"}
	trials := func(sys, sc string) []Trial { return chartTrials(r, sys, sc, onlyMoved) }
	scs := chartScenarios(r, onlyMoved)
	var maxD time.Duration
	for _, sc := range scs {
		for _, sys := range Systems {
			if ts := trials(sys, sc); len(ts) > 0 {
				maxD = max(maxD, stat(ts, metric).Max)
			}
		}
	}
	// Axis top: the next whole half second above the largest value.
	axis := math.Max(0.5, math.Ceil(maxD.Seconds()*2)/2)
	plotH := float64(height - top - bottom)
	y := func(d time.Duration) float64 { return float64(off+top) + plotH*(1-d.Seconds()/axis) }

	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p(`<text x="%d" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n", left, off+22, html.EscapeString(title))
	step := 0.5
	if axis > 5 {
		step = 1
	}
	for v := 0.0; v <= axis+1e-9; v += step {
		yy := y(time.Duration(v * float64(time.Second)))
		p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, yy, width-right, yy)
		p(`<text x="%d" y="%.1f" text-anchor="end">%.1f s</text>`+"\n", left-6, yy+4, v)
	}
	for i, sc := range scs {
		x0 := float64(left) + 20 + float64(i*group)
		for j, sys := range Systems {
			ts := trials(sys, sc)
			x := x0 + float64(j*(barW+barGap))
			if len(ts) == 0 {
				p(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#999">n/a</text>`+"\n", x+barW/2, y(0)-4)
				continue
			}
			s := stat(ts, metric)
			p(`<rect x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s %s: median %s ms (min %s, max %s, %d runs)</title></rect>`+"\n",
				x, y(s.Median), barW, y(0)-y(s.Median), colors[sys], sys, sc, ms(s.Median), ms(s.Min), ms(s.Max), s.N)
			cx := x + barW/2
			p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", cx, y(s.Min), cx, y(s.Max))
			p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", cx-6, y(s.Min), cx+6, y(s.Min))
			p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", cx-6, y(s.Max), cx+6, y(s.Max))
			p(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n", cx, y(s.Max)-4, ms(s.Median))
		}
		p(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x0+barW+barGap/2, off+height-bottom+18, html.EscapeString(sc))
	}
	p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/>`+"\n", left, y(0), width-right, y(0))
	for j, sys := range Systems {
		x := left + 20 + j*140
		p(`<rect x="%d" y="%d" width="14" height="14" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, off+height-28, colors[sys], x+20, off+height-16, sys)
	}
	p(`<text x="%d" y="%d" fill="#555">labels: median in ms</text>`+"\n", left+300, off+height-16)
}
