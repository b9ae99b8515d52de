"""The thesis's manual pattern matrices (seed 000, Appendix A: Tables 3.11, 3.14, 3.17, 5.5),
transcribed verbatim: R / PR / NR / M, and "-" for unidentified. Columns are setups 0..n-1."""

from __future__ import annotations

CODES = {
    "R": "reliable",
    "PR": "partially reliable",
    "NR": "not reliable",
    "M": "misleading",
    "-": "unidentified",
}

TABLES: dict[str, str] = {}

# Table 3.11: Kafka cluster
# (15 setups, columns setup-0..setup-14; "-" = unidentified; thesis header omits "14")
TABLES["kafka"] = """\
metric                           0  1  2  3  4  5  6  7  8  9 10 11 12 13 14
CL_msg_queue                    NR NR  R NR NR NR PR  R NR  R NR  R NR NR  -
CL_error_rate                   NR  R  R  R NR  R NR  M  R  M  R  R NR  R  -
CL_request_latency              NR  R  R NR NR NR NR  R NR  R NR  R NR NR  -
CL_request_in_flight            NR  R  R  R NR PR NR PR  M NR PR  R PR  R  -
CL_request_rate                  R  R  R  R  R  R  R  R  R  M NR  R  R  R  -
CL_response_rate                 R  R  R  R  R  R  R  R  R  M NR  R  R  R  -
cpu_usage                       NR NR NR NR NR NR NR NR NR NR NR NR NR NR  -
memory_usage                    NR  M NR NR NR NR NR NR  M NR NR NR NR NR  -
network_sent                    NR NR NR NR NR NR NR NR NR NR NR NR NR NR  -
network_received                NR NR NR NR NR NR NR NR NR NR NR NR NR NR  -
disk_read                       NR NR NR NR NR NR NR NR NR NR NR NR NR NR  -
disk_write                      NR NR NR NR NR NR NR NR NR NR NR NR NR NR  -
KF_network_threads_usage        NR NR  R  R  R  R  R PR  R  M  R  R NR  R  -
KF_handler_threads_usage         M  R  R  R  R  M NR  M  R  M  R  R NR  R  -
KF_response_queue_time          NR NR  R NR NR NR NR  R NR  R NR  R  R NR  -
KF_request_queue_time           NR  R  R  R NR NR NR  R  R  R NR NR  R  R  -
KF_request_processing_time      NR PR NR PR NR  R NR  R NR  R  R NR PR NR  -
KF_request_queue_size           NR NR NR PR NR NR NR  M  R  M NR  R NR  R  -
KF_response_queue_size          NR NR NR NR NR NR NR  M  M  M NR  R  M NR  -
KF_fetchfollower_queue_time     PR  R  R  R NR  R PR  R PR  R PR  R  R  R  -
KF_fetchfollower_total_time      M NR NR NR NR NR NR  R NR NR NR  R NR  R  -
KF_producer_purgatorySize       NR NR NR NR NR NR NR NR NR  M  R NR NR NR  -
KF_fetchfollower_purgatorySize  NR NR NR NR NR NR NR NR NR PR NR NR NR NR  -
KF_fetchfollower_throttletime   NR  R  M PR NR NR  M NR NR NR NR NR NR NR  -
KF_producer_throttletime        NR NR NR NR NR NR NR NR NR NR NR NR  M NR  -
"""

# Table 3.14: Kafka/Spark
# (10 setups; first 6 RC rows = Kafka nodes, second 6 RC rows (suffix #S) = Spark nodes)
TABLES["kafka-spark"] = """\
metric                           0  1  2  3  4  5  6  7  8  9
CL_msg_queue                    NR NR NR NR  - PR  M PR PR PR
CL_error_rate                    R NR NR PR  -  R NR  M  R  R
CL_request_latency              NR NR NR PR  - PR PR PR PR PR
CL_request_in_flight             M  M  R  M  - PR  M PR PR PR
CL_request_rate                 NR  M  M  M  - NR NR NR NR NR
CL_response_rate                NR  M  M  M  - NR NR NR NR NR
cpu_usage                       NR NR NR NR  - NR NR NR NR NR
memory_usage                     M NR NR NR  - NR NR NR NR NR
network_sent                    NR NR NR NR  - NR  M NR NR NR
network_received                NR NR NR NR  - NR  M NR NR NR
disk_read                       NR NR NR NR  - NR NR NR NR NR
disk_write                       M NR NR NR  -  M PR  M NR NR
KF_network_threads_usage         R  M  M PR  - PR  R PR  R PR
KF_handler_threads_usage        PR  R  R  M  -  M PR NR  R  R
KF_response_queue_time          NR NR NR NR  -  R NR NR NR  R
KF_request_queue_time           NR NR NR  M  -  R  M NR NR  R
KF_request_processing_time      NR  M NR  M  -  R  M NR NR  R
KF_request_queue_size           NR NR NR NR  -  M PR PR PR PR
KF_response_queue_size          NR NR NR NR  -  R  M PR  R PR
KF_fetchfollower_queue_time     PR  R PR  R  -  R PR PR  R NR
KF_fetchconsumer_queue_time      R  R  R  R  - PR PR NR  R  R
KF_fetchfollower_total_time     NR NR NR NR  -  R  M  M  R  R
KF_fetchconsumer_total_time     NR NR NR NR  - PR PR NR  M  M
KF_producer_purgatorySize       NR NR NR NR  - NR NR NR NR NR
KF_fetchfollower_purgatorySize  NR NR NR NR  - PR  M  M  R  R
fetchfollower_throttletime      NR  M  M  R  - NR NR NR NR NR
producer_throttletime           NR NR NR NR  - NR  M NR NR  R
cpu_usage#S                     NR NR NR NR  - NR NR NR NR NR
memory_usage#S                  NR NR NR NR  - NR NR NR NR NR
network_sent#S                  NR NR NR NR  - NR  M NR NR NR
network_received#S              NR NR NR NR  - NR  M NR NR NR
disk_read#S                     NR NR NR NR  - NR NR NR NR NR
disk_write#S                    NR NR NR NR  -  M NR  M NR NR
SP_scheduling_delay             NR NR NR NR  -  R  R  M  M  M
SP_processing_time               R PR NR  M  - PR PR NR NR PR
SP_total_delay                  NR NR NR NR  - PR PR  M  M  M
SP_number_records               NR PR PR PR  - PR  M  M PR PR
KSP_consumer_lag                NR  M  M NR  - PR  M  M PR NR
"""

# Table 3.17: Kafka/Spark/Cassandra (10 setups; no RC rows in this table)
TABLES["kafka-spark-cassandra"] = """\
metric                           0  1  2  3  4  5  6  7  8  9
CL_msg_queue                     R  R NR NR  M  R  R NR NR NR
CL_error_rate                    R  R NR  M PR  R  R NR  R  R
CL_request_latency              NR NR NR  M  M  R  R NR  R  M
CL_request_in_flight            NR  M  M  M  M  R  R  M PR PR
CL_request_rate                  R  R  R PR  R  R  R NR NR NR
CL_response_rate                 R  R  R PR  R  R  R NR NR NR
KF_network_threads_usage         R  R  R  R NR  R  R NR  R  R
KF_handler_threads_usage        NR NR  R  R NR  R NR PR PR NR
KF_response_queue_time          NR NR NR NR  M  R  R  M  M  M
KF_request_queue_time           NR NR NR NR  M  R  R  M  M  M
KF_request_processing_time       M  R NR  R NR  R  R  M  M  M
KF_request_queue_size           NR NR NR NR  M  R  R PR PR PR
KF_response_queue_size          NR NR NR NR  M  R  R  R  R  R
KF_fetchfollower_queue_time     PR PR  M  M PR  R  R PR  R  R
KF_fetchconsumer_queue_time      R PR NR  M PR  R PR NR NR  M
KF_fetchfollower_total_time      M PR PR NR  M  R  R NR  M  M
KF_fetchconsumer_total_time     NR  R NR NR PR PR  M NR PR NR
KF_producer_purgatorySize        M NR NR NR NR NR NR NR NR NR
KF_fetchfollower_purgatorySize  NR NR NR NR  M  R  R  M  M  M
fetchfollower_throttletime      NR NR NR NR NR NR NR NR NR NR
producer_throttletime            M NR NR NR NR NR NR NR NR NR
SP_scheduling_delay             NR PR NR  R PR PR PR  M  R  R
SP_processing_time              PR  R PR NR  M PR PR  R NR  M
SP_total_delay                  NR PR NR  R PR NR PR  M  R  R
SP_number_records               NR PR PR PR NR PR NR  R NR NR
KSP_consumer_lag                NR  R NR NR NR PR NR  M NR  M
CS_write_request_latency        NR PR NR PR PR NR NR NR NR NR
CS_read_request_latency         NR NR NR NR NR NR NR NR  M NR
CS_request_timeout              NR  R NR  M  M PR PR NR NR NR
CS_pending_tasks                NR NR NR NR NR NR NR NR NR NR
"""

# Table 5.5: LAMP (8 setups; first 6 RC rows = Apache node, second 6 (suffix #M) = MySQL nodes)
TABLES["lamp"] = """\
metric                           0  1  2  3  4  5  6  7
cpu_usage                       NR NR NR NR NR NR NR NR
memory_usage                    NR NR NR NR NR NR NR NR
network_sent                    NR NR NR NR NR NR NR NR
network_received                NR NR NR NR NR NR NR NR
disk_read                       NR NR NR NR NR NR NR NR
disk_write                      NR NR NR NR NR NR NR NR
AP_request_rate                 PR  M  M  R NR  R  R  R
AP_bytes_per_second             PR  M  M  R NR  R  R  R
AP_perc_worker_idle             PR NR PR PR PR PR PR PR
AP_request_processing            M NR NR  R PR  M  M NR
AP_error_rate                    R  R  R  R PR  R  R  R
AP_uptime                       NR NR NR NR  M NR  M  M
AP_total_kbytes                 NR NR NR NR NR  M  R  R
AP_num_idle_workers             PR  M  M PR PR  R  R NR
AP_total_access                 NR NR NR NR NR  M  R  M
AP_bytes_per_req                NR NR NR  M  R  R  R  R
cpu_usage#M                     NR NR NR NR NR NR NR NR
memory_usage#M                  NR NR NR NR NR NR NR NR
network_sent#M                  NR NR NR NR NR NR NR NR
network_received#M              NR NR NR NR NR NR NR NR
disk_read#M                     NR NR NR NR NR NR NR NR
disk_write#M                    NR NR NR NR NR NR NR NR
MS_error_rate                   NR PR NR NR NR NR NR NR
MS_query_per_second             NR  M  M PR PR PR PR  R
MS_read_query                    M  M  M NR NR NR NR NR
MS_write_query                   M PR NR NR  M  M  M NR
MS_idle_threads                  M NR NR NR NR NR NR NR
MS_slow_queries                 NR PR NR NR NR NR NR NR
MS_num_active_threads            M  M  M  R  M  M  M NR
MS_cached_threads               PR  R  R  R  R PR  M  R
"""


def matrix(name: str) -> dict[str, dict[str, str]]:
    """{metric: {"s0": category, ...}} of one table."""
    lines = TABLES[name].strip().splitlines()
    header = lines[0].split()[1:]
    out = {}
    for line in lines[1:]:
        metric, *cells = line.split()
        assert len(cells) == len(header), line
        out[metric] = {f"s{h}": CODES[c] for h, c in zip(header, cells, strict=True)}
    return out


def tier(metric: str) -> str:
    """Client metrics (CL_) are client-side; every other metric is server-side."""
    return "client" if metric.startswith("CL_") else "server"
