# An S3 endpoint for the system tests' compose cluster in place of MinIO:
# moto's server, installed from the wheelhouse the tests build on the host.
ARG BASE_IMAGE=tierd-test-base:bookworm
FROM ${BASE_IMAGE}
COPY deploy/wheelhouse /tmp/wheelhouse
RUN python3 -m venv /opt/moto \
    && /opt/moto/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheelhouse \
       "moto[server]" boto3 \
    && rm -rf /tmp/wheelhouse
ENV PATH=/opt/moto/bin:$PATH
CMD ["moto_server", "-H", "127.0.0.1", "-p", "5000"]
