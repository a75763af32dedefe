# report.gp: the chart of `make bench` (bench/run.sh calls it with gnuplot -e settings).
#   datafile  "label" deliveries/s, one row per benchmark row (the median of the rounds)
#   latfile   "label" p50_ms p99_ms max_ms, for the rows with a latency run
#   outfile   the PNG to write
#   stamp     machine, load and commit, printed under the chart
if (!exists("datafile")) datafile = 'bench/results/latest.dat'
if (!exists("latfile")) latfile = 'bench/results/latest-lat.dat'
if (!exists("outfile")) outfile = 'bench/results/latest.png'
if (!exists("stamp")) stamp = ''

set terminal pngcairo size 1200,560 font "sans,10"
set output outfile
set multiplot layout 1,2 title "outboxd — make bench" font "sans,13"

set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.8
set grid ytics
set key top right
set xtics rotate by -25 scale 0 nomirror
set bmargin 8

# The stamp, once, along the bottom edge (a screen label drawn with the first plot only).
set label 1 stamp at screen 0.5, 0.025 center font "sans,9"

# Left: throughput.
set title "deliveries/s (steady window; median of the rounds, or the one run)"
set ylabel "deliveries/s"
set yrange [0:*]
set format y "%.0s%c"
plot datafile using 2:xtic(1) notitle linecolor rgb "#3572b0", \
     '' using 0:($2):($2 > 0 ? sprintf("%.0f", $2) : "n/a") with labels offset 0,0.7 \
        font "sans,9" notitle

unset label 1

# Right: latency at a fixed rate.
set title "latency at a fixed rate, intended send to receipt (ms)"
set ylabel "ms (log scale)"
set logscale y
set yrange [*:*]
set format y "%g"
set key top left
plot latfile using 2:xtic(1) title "p50" linecolor rgb "#59a14f", \
     '' using 3 title "p99" linecolor rgb "#f28e2b", \
     '' using 4 title "max" linecolor rgb "#e15759"

unset multiplot
set output
