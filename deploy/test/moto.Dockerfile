# An S3 endpoint for the system tests' compose cluster in place of MinIO:
# moto's server, installed from the wheelhouse the tests build on the host,
# at the versions of requirements/moto.lock (hashes checked).
ARG BASE_IMAGE=tierd-test-base:bookworm
FROM ${BASE_IMAGE}
COPY deploy/wheelhouse /tmp/wheelhouse
COPY requirements/moto.lock /tmp/moto.lock
RUN python3 -m venv /opt/moto \
    && /opt/moto/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheelhouse \
       --require-hashes --no-deps -r /tmp/moto.lock \
    && rm -rf /tmp/wheelhouse /tmp/moto.lock
ENV PATH=/opt/moto/bin:$PATH
CMD ["moto_server", "-H", "127.0.0.1", "-p", "5000"]
