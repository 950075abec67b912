# ZooKeeper for the system tests' compose cluster: Debian's zookeeper package,
# already in the tests' base image (built with debootstrap; nothing is pulled).
ARG BASE_IMAGE=tierd-test-base:bookworm
FROM ${BASE_IMAGE}
ENV ZOO_PORT=2181
CMD ["sh", "-c", "mkdir -p /tmp/zk && printf 'dataDir=/tmp/zk\\nclientPort=%s\\nclientPortAddress=127.0.0.1\\nadmin.enableServer=false\\ntickTime=500\\n' \"$ZOO_PORT\" > /tmp/zoo.cfg && exec java -Xmx256m -cp '/usr/share/java/zookeeper.jar:/usr/share/java/*' org.apache.zookeeper.server.ZooKeeperServerMain /tmp/zoo.cfg"]
