# The 3D sweep's bars: for every layout D x T x P and ZeRO stage, the largest
# rank's peak tracked bytes, measured (filled) beside planned (hatched), one
# colour per stage, layouts left to right by P, then T. Run from the results
# folder by run.sh (PIPELINES != 1): reads memory_3d.dat (x, label, stage,
# measured MiB, planned MiB; collect.py leaves a gap between layouts);
# run.sh names the run with -e "run='...'" (config, ranks, accumulation).
set terminal pngcairo size 1400,640 font ",11"
set output "memory_3d.png"
if (!exists("run")) run = ""
set title sprintf("%s: peak tracked memory of the largest rank per layout D x T x P and ZeRO stage (z)", run)
set ylabel "MiB on the largest rank"
set yrange [0:*]
set xrange [-1:*]
set xtics rotate by 60 right font ",9" nomirror
set grid ytics
set key outside top center horizontal
set style fill solid 0.85 border -1
set boxwidth 0.4
colors = "#1b9e77 #d95f02 #7570b3 #e7298a"
stage_rgb(s) = s == 0 ? 0x1b9e77 : s == 1 ? 0xd95f02 : s == 2 ? 0x7570b3 : 0xe7298a
plot "memory_3d.dat" using ($1 - 0.2):4:(0.4):(stage_rgb($3)):xtic(2) with boxes lc rgb variable notitle, \
     "" using ($1 + 0.2):5:(0.4):(stage_rgb($3)) with boxes fs pattern 4 border -1 lc rgb variable notitle, \
     for [s=0:3] NaN with boxes fs solid 0.85 lc rgb word(colors, s+1) title sprintf("stage %d measured", s), \
     NaN with boxes fs pattern 4 lc rgb "black" title "planned (hatched, in the stage's colour)"
