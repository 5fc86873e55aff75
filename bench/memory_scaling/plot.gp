# Bytes per rank against ranks, one colour per ZeRO stage: measured (the
# largest rank's peak tracked bytes, solid with filled points) and planned
# (zero-estimate, dashed with open circles). Run from results/ by run.sh:
# reads memory_scaling.dat (one data block per stage, in stage order).
set terminal pngcairo size 960,620 font ",11"
set output "memory_scaling.png"
set title "51M-parameter GPT, bf16 + AdamW (K = 12): peak tracked memory per rank"
set xlabel "data-parallel ranks (mpirun, oversubscribed on 2 cores)"
set ylabel "MiB per rank (the largest rank)"
set logscale x 2
set xrange [0.85:9.5]
set xtics (1, 2, 4, 8)
set yrange [0:*]
set key outside right top vertical
set grid
colors = "#1b9e77 #d95f02 #7570b3 #e7298a"
plot for [s=0:3] "memory_scaling.dat" index s using 1:2 with linespoints lw 2 pt 7 ps 1.2 lc rgb word(colors, s+1) \
       title sprintf("stage %d measured", s), \
     for [s=0:3] "memory_scaling.dat" index s using 1:3 with linespoints dt 2 lw 2 pt 6 ps 2.2 lc rgb word(colors, s+1) \
       title sprintf("stage %d planned", s)
