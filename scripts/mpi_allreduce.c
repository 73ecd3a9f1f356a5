/* MPI_Allreduce over the same sizes as `fabprobe ring`, for scripts/bench-ring.sh.
 * Prints one line per size: bytes time_us algbw_gbs busbw_gbs (rank 0; time is the mean of
 * the slowest rank's iterations, as nccl-tests reports). float32 sum, out of place. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    long minb = argc > 1 ? atol(argv[1]) : 1 << 20;
    long maxb = argc > 2 ? atol(argv[2]) : 64 << 20;
    int iters = argc > 3 ? atoi(argv[3]) : 5;
    int warmup = argc > 4 ? atoi(argv[4]) : 1;
    for (long b = minb; b <= maxb; b *= 2) {
        long count = b / 4;
        float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
        for (long i = 0; i < count; i++) in[i] = (float)((i * 31 + rank * 17) % 251) - 125.0f;
        for (int w = 0; w < warmup; w++) MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int it = 0; it < iters; it++) MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double dt = (MPI_Wtime() - t0) / iters, worst;
        MPI_Reduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double alg = b / worst / 1e9;
            printf("%ld %.1f %.4f %.4f\n", b, worst * 1e6, alg, alg * 2.0 * (n - 1) / n);
            fflush(stdout);
        }
        free(in);
        free(out);
    }
    MPI_Finalize();
    return 0;
}
