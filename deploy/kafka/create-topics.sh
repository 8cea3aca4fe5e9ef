#!/usr/bin/env bash
# Create docsumd's topics on Apache Kafka (for the Kafka source, [sources.kafka]): input, output
# and dead letters. Run where kafka-topics.sh is (e.g. inside the apache/kafka container:
#   docker compose exec kafka /opt/kafka/bin/create-topics.sh, after copying this script in) or set
# KAFKA_BIN. Partitions bound how many daemons can share the work: make them a multiple of the
# number of GPU hosts you expect.
set -euo pipefail
BOOTSTRAP=${BOOTSTRAP:-localhost:9092}
KAFKA_BIN=${KAFKA_BIN:-/opt/kafka/bin}
PARTITIONS=${PARTITIONS:-12}
REPLICATION=${REPLICATION:-1}       # 3 on a production cluster
MAX_MESSAGE_BYTES=${MAX_MESSAGE_BYTES:-33554432}
for topic in "${INPUT_TOPIC:-documents}" "${OUTPUT_TOPIC:-summaries}" "${DEAD_LETTER_TOPIC:-documents.dead-letter}"; do
  "$KAFKA_BIN/kafka-topics.sh" --bootstrap-server "$BOOTSTRAP" --create --if-not-exists \
    --topic "$topic" --partitions "$PARTITIONS" --replication-factor "$REPLICATION" \
    --config max.message.bytes="$MAX_MESSAGE_BYTES" --config retention.ms=1209600000
done
"$KAFKA_BIN/kafka-topics.sh" --bootstrap-server "$BOOTSTRAP" --describe | grep -E "^Topic:" || true
