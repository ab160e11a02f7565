package spike;

import java.util.List;

import javax.enterprise.context.ApplicationScoped;
import javax.enterprise.inject.Produces;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;

/**
 * Stands in for the synthetic bean that the build-time extension
 * io.apicurio:apicurio-common-app-components-config-index-deployment would produce:
 * that artifact is not served by the Maven Central mirror here.
 * Effect: the registry knows no runtime-editable ("dynamic") config properties.
 */
@ApplicationScoped
public class ConfigIndexShim {
    @Produces
    @ApplicationScoped
    DynamicConfigPropertyList dynamicConfigPropertyList() {
        return new DynamicConfigPropertyList(List.of());
    }
}
